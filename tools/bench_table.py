#!/usr/bin/env python3
"""Prints the Markdown tables of a `make bench` JSON file (see tools/bench.sh)."""
import json
import sys

rows = json.load(open(sys.argv[1]))
by = {(r["mode"], r["n"]): r for r in rows}
arch = rows[0]["arch"] if rows else "?"
cpus = rows[0]["cpus"] if rows else "?"
sizes = sorted({r["n"] for r in rows})


def us(ns):
    return f"{ns / 1000:.0f}"


def ratio(a, b):
    return f"{a / b:.2f}" if b else "n/a"


print(f"\n### {arch}, {cpus} CPUs (QEMU TCG): median time per batch, IPIs per batch\n")
if arch == "x86_64":
    print("| N | textpoke µs | upstream static key µs | time ratio | textpoke syncs | "
          "textpoke call IPIs | upstream call IPIs | IPI ratio | worst stall textpoke µs | "
          "worst stall upstream µs |")
    print("|---:" * 10 + "|")
    for n in sizes:
        t, u = by.get(("textpoke", n)), by.get(("static_key", n))
        if not t or not u:
            continue
        print(f"| {n} | {us(t['median_ns'])} | {us(u['median_ns'])} | "
              f"{ratio(t['median_ns'], u['median_ns'])} | {t['syncs_per_batch']} | "
              f"{t['call_ipis_per_batch']:.0f} | {u['call_ipis_per_batch']:.0f} | "
              f"{ratio(t['call_ipis_per_batch'], u['call_ipis_per_batch'])} | "
              f"{us(t['max_stall_ns'])} | {us(u['max_stall_ns'])} |")
else:
    modes = [("textpoke", "(a) textpoke"), ("nosync", "(b) nosync + kick"),
             ("stop_machine", "(c) stop_machine"), ("static_key", "upstream static key")]
    print("| N | mode | µs/batch | ratio to (a) | call IPIs/batch | worst stall µs | "
          "TEXT_POKE stream |")
    print("|---:|---|---:|---:|---:|---:|---|")
    for n in sizes:
        a = by.get(("textpoke", n))
        for key, label in modes:
            r = by.get((key, n))
            if not r or not a:
                continue
            # make test replays textpoke's stream onto /proc/kcore; here only the count is known.
            stream = (f"yes, {r['records_per_batch']} record{'s' if n > 1 else ''} per batch"
                      if r["records_per_batch"] >= n else "none")
            print(f"| {n} | {label} | {us(r['median_ns'])} | "
                  f"{ratio(r['median_ns'], a['median_ns'])} | {r['call_ipis_per_batch']:.0f} | "
                  f"{us(r['max_stall_ns'])} | {stream} |")
