//! Model checking of the pending table's publish / lookup / retire protocol with loom.
//!
//! Run with `RUSTFLAGS="--cfg loom" cargo test --release -p textpoke-core --test pending_loom`.
//! The table is instantiated with 2 slots to keep the state space small; the protocol does
//! not depend on the slot count.
#![cfg(loom)]

use loom::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use loom::sync::Arc;
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
        for addr in [0x40u64, 0x80] {
            let mut e = vec![Entry {
                addr,
                value: addr + 1,
            }];
            t.with_published(&e, thread::yield_now, || ()).unwrap();
            e[0].value = POISON;
        }
        for r in readers {
            r.join().unwrap();
        }
    });
}
