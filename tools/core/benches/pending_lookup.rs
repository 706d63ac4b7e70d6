//! Lookup cost of the pending-instruction table: the work the trap handler does per trap.
#![expect(
    missing_docs,
    reason = "criterion_group! generates an undocumented pub fn"
)]
//!
//! Single-thread lookups at 1, 256, 4096 and 65536 in-flight entries (in one batch, and spread
//! over 16 batches), and lookups from 2 threads at once on different CPU counters.

use criterion::{black_box, criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread;
use textpoke_core::pending::{CpuReaders, Pending, PendingTable, MAX_BATCHES};

#[derive(Clone, Copy)]
struct Entry {
    addr: u64,
}

impl Pending for Entry {
    fn addr(&self) -> u64 {
        self.addr
    }
    fn size(&self) -> u64 {
        5
    }
}

type Table = PendingTable<Entry, Vec<CpuReaders>>;

/// How `n` entries are dealt into a number of batches.
type Layout = fn(usize, usize) -> Vec<Vec<Entry>>;

fn table() -> Table {
    PendingTable::new((0..2).map(|_| CpuReaders::new()).collect())
}

/// `n` sites 8 bytes apart, dealt round-robin into `batches` sorted batches, so that every
/// batch's range covers every address (the worst case for the range filter).
fn batches(n: usize, batches: usize) -> Vec<Vec<Entry>> {
    let mut out = vec![Vec::new(); batches];
    for i in 0..n {
        out[i % batches].push(Entry {
            addr: 0xffff_ffff_c000_0000 + i as u64 * 8,
        });
    }
    out
}

/// `n` sites 8 bytes apart, cut into `batches` contiguous batches (disjoint ranges, as when the
/// batches patch different functions or modules).
fn contiguous(n: usize, batches: usize) -> Vec<Vec<Entry>> {
    let per = n.div_ceil(batches);
    (0..n)
        .map(|i| Entry {
            addr: 0xffff_ffff_c000_0000 + i as u64 * 8,
        })
        .collect::<Vec<_>>()
        .chunks(per)
        .map(<[Entry]>::to_vec)
        .collect()
}

/// Publishes every batch (nested, so all are in flight at once) and runs `f` inside.
fn with_all(t: &Table, batches: &[Vec<Entry>], f: &mut dyn FnMut()) {
    match batches.split_first() {
        None => f(),
        Some((first, rest)) => t
            .with_published(first, || {}, || with_all(t, rest, f))
            .expect("disjoint batches"),
    }
}

fn addresses(n: usize) -> Vec<u64> {
    let mut x = 0x9e37_79b9_7f4a_7c15u64;
    (0..4096)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            0xffff_ffff_c000_0000 + (x % n as u64) * 8
        })
        .collect()
}

fn lookups(c: &mut Criterion) {
    let mut group = c.benchmark_group("lookup");
    group.throughput(Throughput::Elements(1));
    for &n in &[1usize, 256, 4096, 65536] {
        // One batch, and (where there are enough entries) the most batches in flight, with
        // interleaved or disjoint ranges.
        let layouts: [(&str, usize, Layout); 3] = [
            ("1_batches", 1, batches),
            ("16_batches", MAX_BATCHES, batches),
            ("16_disjoint_batches", MAX_BATCHES, contiguous),
        ];
        for (name, spread, layout) in layouts.into_iter().filter(|l| l.1 <= n) {
            let t = table();
            let b = layout(n, spread);
            let addrs = addresses(n);
            with_all(&t, &b, &mut || {
                group.bench_with_input(BenchmarkId::new(name, n), &n, |bench, _| {
                    let mut i = 0;
                    bench.iter(|| {
                        i = (i + 1) % addrs.len();
                        black_box(t.lookup(0, black_box(addrs[i])))
                    })
                });
            });
        }
    }
    group.finish();
}

fn concurrent(c: &mut Criterion) {
    let mut group = c.benchmark_group("lookup_2_threads");
    group.throughput(Throughput::Elements(1));
    for &n in &[256usize, 4096] {
        let t = Arc::new(table());
        let b = batches(n, MAX_BATCHES);
        let addrs = Arc::new(addresses(n));
        with_all(&t, &b, &mut || {
            // A second thread hammers lookups on CPU 1 while the measured one uses CPU 0: with
            // per-CPU counters they share no written cache line.
            let stop = Arc::new(AtomicBool::new(false));
            // The other thread is joined before the batches retire.
            let other = {
                let (t, addrs, stop) = (t.clone(), addrs.clone(), stop.clone());
                thread::spawn(move || {
                    let mut i = 0;
                    while !stop.load(Ordering::Relaxed) {
                        i = (i + 1) % addrs.len();
                        black_box(t.lookup(1, addrs[i]));
                    }
                })
            };
            group.bench_with_input(BenchmarkId::new("16_batches", n), &n, |bench, _| {
                let mut i = 0;
                bench.iter(|| {
                    i = (i + 1) % addrs.len();
                    black_box(t.lookup(0, black_box(addrs[i])))
                })
            });
            stop.store(true, Ordering::Relaxed);
            other.join().expect("lookup thread");
        });
    }
    group.finish();
}

criterion_group!(benches, lookups, concurrent);
criterion_main!(benches);
