//! The pending-instruction table: validation, lookups, and a std-threads stress test.
#![cfg(not(loom))]

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Barrier};
use std::thread;
use textpoke_core::pending::{
    CpuReaders, Pending, PendingTable, PublishError, ENGINE_SLOTS, MAX_BATCHES,
};

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Entry {
    addr: u64,
    len: u64,
    /// The "new instruction": a value tied to the batch and address, so a lookup can check
    /// it got the right one.
    value: u64,
}

impl Pending for Entry {
    fn addr(&self) -> u64 {
        self.addr
    }
    fn size(&self) -> u64 {
        self.len
    }
}

fn entry(addr: u64, len: u64) -> Entry {
    Entry {
        addr,
        len,
        value: addr ^ 0xabcd,
    }
}

fn table(cpus: usize) -> PendingTable<Entry, Vec<CpuReaders>> {
    PendingTable::new((0..cpus).map(|_| CpuReaders::new()).collect())
}

fn nothing() {}

#[test]
fn validates_batches() {
    let t = table(1);
    let run = |e: &[Entry]| t.with_published(e, nothing, || ());
    assert_eq!(run(&[]), Err(PublishError::Empty));
    assert_eq!(
        run(&[entry(0x20, 5), entry(0x10, 5)]),
        Err(PublishError::Unsorted)
    );
    assert_eq!(
        run(&[entry(0x10, 5), entry(0x10, 5)]),
        Err(PublishError::Duplicate)
    );
    assert_eq!(
        run(&[entry(0x10, 5), entry(0x14, 5)]),
        Err(PublishError::Overlap)
    );
    assert_eq!(run(&[entry(0x10, 0)]), Err(PublishError::Overlap));
    assert_eq!(run(&[entry(u64::MAX - 1, 5)]), Err(PublishError::Overlap));
    assert_eq!(run(&[entry(0x10, 5), entry(0x15, 5)]), Ok(()));
    assert_eq!(t.in_flight(), 0);
}

#[test]
fn finds_exactly_the_published_sites_while_in_flight() {
    let t = table(2);
    let batch: Vec<Entry> = (0..100).map(|i| entry(0x1000 + i * 8, 5)).collect();
    assert_eq!(t.lookup(0, 0x1000), None);
    t.with_published(&batch, nothing, || {
        assert_eq!(t.in_flight(), 1);
        for e in &batch {
            assert_eq!(t.lookup(1, e.addr), Some(*e));
            // Only a site's first byte is a guard address.
            assert_eq!(t.lookup(1, e.addr + 1), None);
        }
        assert_eq!(t.lookup(0, 0x0fff), None);
        assert_eq!(t.lookup(0, 0x1000 + 100 * 8), None);
        // Out-of-range CPU: not ours, never a panic.
        assert_eq!(t.lookup(7, 0x1000), None);
    })
    .unwrap();
    assert_eq!(t.lookup(0, 0x1000), None);
}

#[test]
fn batches_nest_and_conflicts_are_refused() {
    let t = table(1);
    let a = [entry(0x100, 5), entry(0x300, 5)];
    let b = [entry(0x200, 5), entry(0x400, 2)]; // interleaved with `a`, disjoint
    let c = [entry(0x302, 1)]; // inside a site of `a`
    t.with_published(&a, nothing, || {
        t.with_published(&b, nothing, || {
            assert_eq!(t.in_flight(), 2);
            assert_eq!(t.lookup(0, 0x300), Some(a[1]));
            assert_eq!(t.lookup(0, 0x200), Some(b[0]));
            assert_eq!(
                t.with_published(&c, nothing, || ()),
                Err(PublishError::Conflict)
            );
            assert_eq!(
                t.with_published(&[a[0]], nothing, || ()),
                Err(PublishError::Conflict)
            );
        })
        .unwrap();
    })
    .unwrap();
    // Once `a` is retired the same sites can be published again.
    assert_eq!(t.with_published(&c, nothing, || ()), Ok(()));
}

#[test]
fn refuses_more_than_max_batches_in_flight() {
    let t = table(1);
    fn nest(t: &PendingTable<Entry, Vec<CpuReaders>>, depth: usize) {
        let e = [entry(0x1000 * (depth as u64 + 1), 4)];
        let r = t.with_published(&e, nothing, || {
            if depth + 1 < MAX_BATCHES {
                nest(t, depth + 1);
            } else {
                let extra = [entry(0x10, 1)];
                assert_eq!(
                    t.with_published(&extra, nothing, || ()),
                    Err(PublishError::Full)
                );
            }
        });
        assert!(r.is_ok());
    }
    nest(&t, 0);
}

/// Readers on every CPU look up random addresses while several publishers publish, look up and
/// retire batches over and over; after retiring, a publisher poisons its entries. A reader must
/// never see a poisoned value or a value from the wrong address, and must always find an entry
/// whose batch it knows is in flight.
#[test]
fn stress_readers_and_concurrent_publishers() {
    const CPUS: usize = 3;
    const PUBLISHERS: usize = 3;
    const ROUNDS: u64 = 4_000;
    const POISON: u64 = u64::MAX;
    let t = Arc::new(table(CPUS));
    let stop = Arc::new(AtomicBool::new(false));
    let lookups = Arc::new(AtomicU64::new(0));
    let found = Arc::new(AtomicU64::new(0));
    let start = Arc::new(Barrier::new(CPUS + PUBLISHERS));

    let readers: Vec<_> = (0..CPUS)
        .map(|cpu| {
            let (t, stop, lookups, found, start) = (
                t.clone(),
                stop.clone(),
                lookups.clone(),
                found.clone(),
                start.clone(),
            );
            thread::spawn(move || {
                start.wait();
                let mut x = cpu as u64 + 1;
                while !stop.load(Ordering::Relaxed) {
                    x ^= x << 13;
                    x ^= x >> 7;
                    x ^= x << 17;
                    let addr = 0x10_0000 + (x % 4096) * 8;
                    lookups.fetch_add(1, Ordering::Relaxed);
                    if let Some(e) = t.lookup(cpu, addr) {
                        assert_ne!(e.value, POISON, "read a retired batch");
                        assert_eq!(e.addr, addr);
                        assert_eq!(e.value, addr ^ 0xabcd);
                        found.fetch_add(1, Ordering::Relaxed);
                    }
                }
            })
        })
        .collect();

    let publishers: Vec<_> = (0..PUBLISHERS as u64)
        .map(|p| {
            let (t, start, lookups) = (t.clone(), start.clone(), lookups.clone());
            thread::spawn(move || {
                start.wait();
                for round in 0..ROUNDS {
                    // Each publisher owns addresses congruent to p mod PUBLISHERS, so their
                    // batches interleave in the address space without overlapping.
                    let n = 1 + (round % 64);
                    let mut batch: Vec<Entry> = (0..n)
                        .map(|i| entry(0x10_0000 + ((i * 7 + round) % 1365 * 3 + p) * 8, 5))
                        .collect();
                    batch.sort_by_key(|e| e.addr);
                    batch.dedup_by_key(|e| e.addr);
                    t.with_published(&batch, thread::yield_now, || {
                        for e in &batch {
                            assert_eq!(t.lookup(p as usize % CPUS, e.addr), Some(*e));
                        }
                        // Now and then a batch of 64 stays in flight until the readers have
                        // made 10000 lookups (some 150 of them at its sites), so that they meet
                        // live batches however the threads are scheduled; for two seconds at
                        // most, in case the readers have stopped (a failed assertion).
                        if round % 256 == 63 {
                            let seen = lookups.load(Ordering::Relaxed);
                            let until =
                                std::time::Instant::now() + std::time::Duration::from_secs(2);
                            while lookups.load(Ordering::Relaxed) < seen + 10_000
                                && std::time::Instant::now() < until
                            {
                                thread::yield_now();
                            }
                        }
                    })
                    .expect("disjoint batches never conflict");
                    for e in batch.iter_mut() {
                        let poisoned = Entry {
                            value: POISON,
                            ..*e
                        };
                        // SAFETY: `e` is a valid, exclusive reference. Volatile: `batch` is
                        // dropped right after, and a plain store before a free is dead code the
                        // compiler may remove.
                        unsafe { std::ptr::write_volatile(e, poisoned) };
                    }
                }
            })
        })
        .collect();

    for p in publishers {
        p.join().unwrap();
    }
    stop.store(true, Ordering::Relaxed);
    for r in readers {
        r.join().unwrap();
    }
    println!(
        "{} lookups, {} found, {} batches",
        lookups.load(Ordering::Relaxed),
        found.load(Ordering::Relaxed),
        PUBLISHERS as u64 * ROUNDS
    );
    assert!(found.load(Ordering::Relaxed) > 0);
    assert_eq!(t.in_flight(), 0);
}

/// The engine's table reserves its last slot for the kernel's own batches (kernel/patcher.rs),
/// which commit holding `text_mutex` and so must never wait for a slot: the modules' batches
/// still get `MAX_BATCHES` slots, never the reserved one, and the reserved one takes one batch.
#[test]
fn reserved_slot_is_the_kernels_alone() {
    const SLOTS: usize = ENGINE_SLOTS;
    let readers: Vec<CpuReaders<SLOTS>> = (0..1).map(|_| CpuReaders::new()).collect();
    let t: PendingTable<Entry, Vec<CpuReaders<SLOTS>>, SLOTS> =
        PendingTable::with_reserved(readers, 1);
    fn nest(t: &PendingTable<Entry, Vec<CpuReaders<SLOTS>>, SLOTS>, depth: usize) {
        let e = [entry(0x1000 * (depth as u64 + 1), 4)];
        let r = t.with_published(&e, nothing, || {
            if depth + 1 < MAX_BATCHES {
                nest(t, depth + 1);
                return;
            }
            // Every shared slot is taken: a module's batch is refused...
            let extra = [entry(0x10, 1)];
            assert_eq!(
                t.with_published(&extra, nothing, || ()),
                Err(PublishError::Full)
            );
            // ...and the kernel's goes in the reserved slot, where a lookup finds it...
            let kernel = [entry(0x20, 1)];
            let r = t.with_published_in(true, &kernel, nothing, || {
                assert!(t.lookup(0, 0x20).is_some());
                // ...which holds one batch only.
                assert_eq!(
                    t.with_published_in(true, &[entry(0x30, 1)], nothing, || ()),
                    Err(PublishError::Full)
                );
            });
            assert_eq!(r, Ok(()));
        });
        assert!(r.is_ok());
    }
    nest(&t, 0);
    // A table without a reserved slot has none to give.
    assert_eq!(
        table(1).with_published_in(true, &[entry(0x20, 1)], nothing, || ()),
        Err(PublishError::Full)
    );
}
