//! Model checking of the pending table's publish / lookup / retire protocol with loom.
//!
//! Run with `RUSTFLAGS="--cfg loom" cargo test --release -p textpoke-core --test pending_loom`.
//! The table is instantiated with 2 slots to keep the state space small; the protocol does
//! not depend on the slot count.
#![cfg(loom)]

use loom::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use loom::sync::{Arc, Notify};
use loom::thread;
use textpoke_core::pending::{CpuReaders, Pending, PendingTable};

const SLOTS: usize = 2;
const POISON: u64 = 0xdead;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Entry {
    addr: u64,
    value: u64,
}

impl Pending for Entry {
    fn addr(&self) -> u64 {
        self.addr
    }
    fn size(&self) -> u64 {
        4
    }
}

type Table = PendingTable<Entry, Vec<CpuReaders<SLOTS>>, SLOTS>;

fn table(cpus: usize) -> Arc<Table> {
    Arc::new(PendingTable::new(
        (0..cpus).map(|_| CpuReaders::new()).collect(),
    ))
}

/// Overwrites `entries` after their batch was retired, so that a lookup or a conflict check that
/// still reads them sees `with`. Volatile: the entries are dropped right after, and a plain
/// store before a free is dead code the compiler may remove.
fn poison(entries: &mut [Entry], with: Entry) {
    for e in entries {
        // SAFETY: `e` is a valid, exclusive reference.
        unsafe { std::ptr::write_volatile(e, with) };
    }
}

/// Explores every interleaving of `f` (up to 3 preemptions) and prints how many there were.
fn model(f: impl Fn() + Sync + Send + 'static) {
    let iterations = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let counted = iterations.clone();
    let mut builder = loom::model::Builder::new();
    builder.preemption_bound = Some(3);
    builder.check(move || {
        counted.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        f();
    });
    println!(
        "loom explored {} interleavings",
        iterations.load(std::sync::atomic::Ordering::Relaxed)
    );
}

/// A reader that saw the guard finds the entry unless it was already retired, and never reads
/// an entry after the publisher got its storage back (poisoned it).
#[test]
fn lookup_never_reads_retired_storage() {
    model(|| {
        let t = table(1);
        let guard = Arc::new(AtomicBool::new(false));
        let (t2, guard2) = (t.clone(), guard.clone());
        let reader = thread::spawn(move || {
            if guard2.load(Ordering::Acquire) {
                if let Some(e) = t2.lookup(0, 0x40) {
                    assert_eq!(e.value, 1, "read poisoned or foreign storage");
                }
            }
        });
        let mut entries = vec![Entry {
            addr: 0x40,
            value: 1,
        }];
        t.with_published(&entries, thread::yield_now, || {
            guard.store(true, Ordering::Release);
        })
        .unwrap();
        entries[0].value = POISON;
        reader.join().unwrap();
    });
}

/// While the guard is up, a reader that saw it must find the entry: the trap handler may never
/// miss a live guard. The publisher waits for the reader before retiring, as the engine's last
/// sync waits for every CPU's trap handler.
#[test]
fn lookup_finds_live_entries() {
    model(|| {
        let t = table(1);
        let up = Arc::new(AtomicBool::new(false));
        let done = Arc::new(AtomicBool::new(false));
        let (t2, up2, done2) = (t.clone(), up.clone(), done.clone());
        let reader = thread::spawn(move || {
            if up2.load(Ordering::Acquire) {
                assert_eq!(
                    t2.lookup(0, 0x40),
                    Some(Entry {
                        addr: 0x40,
                        value: 1
                    })
                );
            }
            done2.store(true, Ordering::Release);
        });
        let entries = vec![Entry {
            addr: 0x40,
            value: 1,
        }];
        t.with_published(&entries, thread::yield_now, || {
            up.store(true, Ordering::Release);
            while !done.load(Ordering::Acquire) {
                thread::yield_now();
            }
        })
        .unwrap();
        reader.join().unwrap();
    });
}

/// Two publishers of overlapping batches are never in flight at the same time.
#[test]
fn overlapping_publishers_exclude_each_other() {
    model(|| {
        let t = table(1);
        let inside = Arc::new(AtomicUsize::new(0));
        let spawn = |addr: u64| {
            let (t, inside) = (t.clone(), inside.clone());
            thread::spawn(move || {
                let e = [Entry { addr, value: addr }];
                let _ = t.with_published(&e, thread::yield_now, || {
                    assert_eq!(inside.fetch_add(1, Ordering::SeqCst), 0, "both in flight");
                    inside.fetch_sub(1, Ordering::SeqCst);
                });
            })
        };
        let a = spawn(0x40);
        let b = spawn(0x42); // overlaps [0x40, 0x44)
        a.join().unwrap();
        b.join().unwrap();
    });
}

/// Publishers of disjoint batches never refuse each other.
#[test]
fn disjoint_publishers_both_succeed() {
    model(|| {
        let t = table(1);
        let spawn = |addr: u64| {
            let t = t.clone();
            thread::spawn(move || {
                let e = [Entry { addr, value: addr }];
                t.with_published(&e, thread::yield_now, || ()).unwrap();
            })
        };
        let a = spawn(0x40);
        let b = spawn(0x80);
        a.join().unwrap();
        b.join().unwrap();
    });
}

/// A slot reused by a later batch is never read half-written, and nested readers on one CPU
/// (an NMI trapping inside the trap handler) share its counter correctly.
#[test]
fn slot_reuse_with_nested_readers_on_one_cpu() {
    model(|| {
        let t = table(1);
        let readers: Vec<_> = [0x40u64, 0x80]
            .into_iter()
            .map(|addr| {
                let t = t.clone();
                thread::spawn(move || {
                    if let Some(e) = t.lookup(0, addr) {
                        assert_eq!(
                            e,
                            Entry {
                                addr,
                                value: addr + 1
                            }
                        );
                    }
                })
            })
            .collect();
        let mut batches = [0x40u64, 0x80].map(|addr| {
            vec![Entry {
                addr,
                value: addr + 1,
            }]
        });
        for e in &mut batches {
            t.with_published(e, thread::yield_now, || ()).unwrap();
            let addr = e[0].addr;
            poison(
                e,
                Entry {
                    addr,
                    value: POISON,
                },
            );
        }
        for r in readers {
            r.join().unwrap();
        }
    });
}

/// A publisher comparing its batch against another batch never reads that batch's storage after
/// its publisher got it back. The first publisher rewrites its retired entry to overlap the
/// second's: a second publisher that still compared against it would refuse a batch that
/// overlaps nothing in flight.
#[test]
fn checker_never_reads_retired_storage() {
    model(|| {
        let t = table(1);
        let t2 = t.clone();
        let other = thread::spawn(move || {
            let e = [Entry {
                addr: 0x80,
                value: 2,
            }];
            t2.with_published(&e, thread::yield_now, || ())
                .expect("refused because of a retired batch");
        });
        let mut e = vec![Entry {
            addr: 0x40,
            value: 1,
        }];
        t.with_published(&e, thread::yield_now, || ()).unwrap();
        poison(
            &mut e,
            Entry {
                addr: 0x80,
                value: POISON,
            },
        );
        other.join().unwrap();
    });
}

/// A slot is reused only once its readers are gone, so a reader never pairs the entry pointer
/// of one batch with the length of the next. The first batch is the first entry of an array
/// whose second entry, never published, is a canary at the address the reader looks up; the
/// batch published next in the same (only) slot has two entries. A reader that took the first
/// batch's pointer with the second's length would find the canary.
///
/// The second batch stays in flight until the reader is done, blocked rather than spinning:
/// with two threads spinning (two retires waiting for the same reader), loom explores the
/// spinners' interleavings without bound instead of reaching the reader.
#[test]
fn slot_is_reused_only_after_its_readers_leave() {
    model(|| {
        let t: Arc<PendingTable<Entry, Vec<CpuReaders<1>>, 1>> =
            Arc::new(PendingTable::new(vec![CpuReaders::new()]));
        let done = Arc::new((AtomicBool::new(false), Notify::new()));
        let (t2, t3, done2) = (t.clone(), t.clone(), done.clone());
        let reader = thread::spawn(move || {
            if let Some(e) = t2.lookup(0, 0x42) {
                assert_eq!(e.value, 2, "read past the end of a batch");
            }
            done2.0.store(true, Ordering::Release);
            done2.1.notify();
        });
        let next = thread::spawn(move || {
            let e = [
                Entry {
                    addr: 0x30,
                    value: 2,
                },
                Entry {
                    addr: 0x42,
                    value: 2,
                },
            ];
            // Refused as `Full` while the first batch holds the slot.
            let _ = t3.with_published(&e, thread::yield_now, || {
                while !done.0.load(Ordering::Acquire) {
                    done.1.wait();
                }
            });
        });
        let storage = [
            Entry {
                addr: 0x40,
                value: 1,
            },
            Entry {
                addr: 0x42,
                value: POISON,
            },
        ];
        // Refused as `Full` if the next batch got the slot first.
        let _ = t.with_published(&storage[..1], thread::yield_now, || ());
        reader.join().unwrap();
        next.join().unwrap();
    });
}

/// A batch is visible to readers only once no batch in flight overlaps it: a reader that trapped
/// on the guard of the batch in flight finds that batch's instruction, never the instruction of
/// an overlapping batch that is being refused.
#[test]
fn refused_batch_is_never_found() {
    model(|| {
        let t = table(1);
        let up = Arc::new(AtomicBool::new(false));
        let done = Arc::new(AtomicBool::new(false));
        let (t2, up2, done2) = (t.clone(), up.clone(), done.clone());
        let reader = thread::spawn(move || {
            if up2.load(Ordering::Acquire) {
                let found = t2.lookup(0, 0x40).map(|e| e.value);
                assert_eq!(found, Some(1), "found the instruction of a refused batch");
            }
            done2.store(true, Ordering::Release);
        });
        let t3 = t.clone();
        let other = thread::spawn(move || {
            let e = [Entry {
                addr: 0x40,
                value: 2,
            }];
            let _ = t3.with_published(&e, thread::yield_now, || ());
        });
        let e = [Entry {
            addr: 0x40,
            value: 1,
        }];
        let _ = t.with_published(&e, thread::yield_now, || {
            up.store(true, Ordering::Release);
            while !done.load(Ordering::Acquire) {
                thread::yield_now();
            }
        });
        reader.join().unwrap();
        other.join().unwrap();
    });
}
