// SPDX-License-Identifier: GPL-2.0

//! The registry of patchable sites: the only addresses the engine will ever write.
//!
//! A module declares each site of its own text once, with the instruction it holds. From then
//! on a batch can only name registered sites by their exact address, so the engine never
//! becomes a way to write arbitrary kernel memory: not for another module, and not for
//! userspace, which reaches it only through a sample's site indices.
//!
//! Sites are kept sorted by address; a site is owned by at most one batch at a time.

use crate::arch::Arch;
use crate::current_arch::CurrentArch;
use crate::errno;
use crate::insn::{InsnBytes, MAX_INSN_LEN};
use crate::kernel_text;
use crate::module_text::Module;
use crate::patch_series::Generic;
use kernel::prelude::*;

/// A registered site.
#[derive(Clone, Copy)]
pub(crate) struct Site {
    /// Address of its first byte.
    pub(crate) addr: u64,
    /// The module whose text holds it.
    pub(crate) owner: Module,
    /// The instruction it holds whenever no batch is changing it.
    pub(crate) current: InsnBytes,
    /// The batch that owns it (it is being changed), or 0.
    pub(crate) batch: u64,
}

impl Site {
    /// Its length in bytes: every instruction installed there must have this length.
    pub(crate) fn len(&self) -> usize {
        self.current.len()
    }

    fn end(&self) -> u64 {
        self.addr.saturating_add(self.current.len() as u64)
    }
}

/// Where an address falls among the registered sites.
pub(crate) enum Found {
    /// It is the first byte of site `index`.
    Site(usize),
    /// It lies inside a site without being its first byte.
    Inside,
    /// No site covers it.
    Nowhere,
}

/// The registered sites, sorted by address and pairwise disjoint.
pub(crate) struct Sites {
    list: KVec<Site>,
    /// The engine's own module: its text is the trap path and is never patched.
    engine: Module,
}

impl Sites {
    /// An empty registry for the engine module `engine`.
    pub(crate) fn new(engine: Module) -> Self {
        Self {
            list: KVec::new(),
            engine,
        }
    }

    /// Number of registered sites.
    pub(crate) fn count(&self) -> usize {
        self.list.len()
    }

    /// Site `index`, mutably, or `EINVAL` with a log line (see [`Sites::get`]).
    pub(crate) fn get_mut(&mut self, index: usize) -> Result<&mut Site> {
        self.list.get_mut(index).ok_or_else(|| {
            pr_err!("site registry: index {index} out of range\n");
            EINVAL
        })
    }

    /// Where `addr` falls.
    pub(crate) fn find(&self, addr: u64) -> Found {
        // The last site starting at or before `addr` is the only one that can cover it.
        let after = self.list.partition_point(|s| s.addr <= addr);
        match after
            .checked_sub(1)
            .and_then(|i| self.list.get(i).map(|s| (i, s)))
        {
            Some((i, s)) if s.addr == addr => Found::Site(i),
            Some((_, s)) if addr < s.end() => Found::Inside,
            _ => Found::Nowhere,
        }
    }

    /// The checks of [`Sites::register`] that need no registered site: refuses (see
    /// [`crate::errno`]) the engine's own text, lengths no listed instruction has, and addresses
    /// outside the owner's core text.
    pub(crate) fn vet(&self, owner: Module, addr: u64, len: usize) -> Result {
        if owner == self.engine || self.engine.text_contains(addr, 1) {
            pr_err!(
                "refusing site {:#x}: it is in textpoke's own text (the trap path)\n",
                addr
            );
            return Err(errno::engine_text());
        }
        if len == 0 || len > MAX_INSN_LEN {
            pr_err!(
                "refusing site {:#x}+{}: no listed instruction has that length\n",
                addr,
                len
            );
            return Err(errno::wrong_size());
        }
        if !owner.text_contains(addr, len as u64) {
            pr_err!(
                "refusing site {:#x}+{}: not inside its module's text\n",
                addr,
                len
            );
            return Err(errno::outside_text());
        }
        Ok(())
    }

    /// Refuses (with [`errno::other_patcher`]) a site whose text a jump label, a static call,
    /// ftrace or a kprobe owns.
    ///
    /// Called without the sites lock, between [`Sites::vet`] and [`Sites::register`]: the check
    /// takes `kprobe_mutex`, under which kprobes takes `cpu_hotplug_lock`, under which a commit
    /// takes the sites lock. A kprobe armed after the check is caught as any later one is: the
    /// site's text no longer reads as the engine left it, and changes to it fail with `EIO`.
    pub(crate) fn refuse_other_patchers(generic: &Generic, addr: u64, len: usize) -> Result {
        if crate::debug::defect() == crate::debug::Defect::IgnoreOtherPatchers {
            return Ok(());
        }
        if let Some(owner) = generic.text_owner(addr, addr.saturating_add(len as u64)) {
            pr_err!("refusing site {:#x}: its text belongs to {owner}\n", addr);
            return Err(errno::other_patcher());
        }
        Ok(())
    }

    /// Registers the `len`-byte site at `addr` in `owner`'s text, which passed
    /// [`Sites::refuse_other_patchers`].
    ///
    /// Refuses (see [`crate::errno`]) what [`Sites::vet`] refuses, overlaps with registered
    /// sites, and instructions the codec cannot decode as exactly `len` bytes.
    pub(crate) fn register(&mut self, owner: Module, addr: u64, len: usize) -> Result {
        self.vet(owner, addr, len)?;
        let mut buf = [0u8; MAX_INSN_LEN];
        let bytes = buf.get_mut(..len).ok_or(errno::wrong_size())?;
        kernel_text::read(addr, bytes)?;
        CurrentArch::accept(addr, bytes).map_err(|e| {
            pr_err!(
                "refusing site {:#x}: its instruction: {}\n",
                addr,
                e.as_str()
            );
            errno::insn(e)
        })?;
        let end = addr.saturating_add(len as u64);
        let at = self.list.partition_point(|s| s.addr < addr);
        let overlaps_prev = at
            .checked_sub(1)
            .and_then(|i| self.list.get(i))
            .is_some_and(|p| p.end() > addr);
        let overlaps_next = self.list.get(at).is_some_and(|n| n.addr < end);
        if overlaps_prev || overlaps_next {
            pr_err!("refusing site {:#x}: it overlaps a registered site\n", addr);
            return Err(errno::inside_site());
        }
        let site = Site {
            addr,
            owner,
            current: InsnBytes::new(bytes).map_err(errno::insn)?,
            batch: 0,
        };
        self.list.push(site, GFP_KERNEL)?;
        // `KVec` has no insert in 6.12: append, then rotate the new site into place.
        if let Some(tail) = self.list.get_mut(at..) {
            tail.rotate_right(1);
        }
        Ok(())
    }

    /// Unregisters the site at `addr`, which `owner` registered.
    ///
    /// Refuses unknown sites (`ENOENT`), sites of another module (`EACCES`) and sites a batch
    /// owns (`EBUSY`), each with a log line.
    pub(crate) fn unregister(&mut self, owner: Module, addr: u64) -> Result {
        let i = match self.find(addr) {
            Found::Site(i) => i,
            _ => {
                pr_err!(
                    "refusing to unregister {:#x}: not a registered site\n",
                    addr
                );
                return Err(errno::not_registered());
            }
        };
        let site = self.get(i)?;
        if site.owner != owner {
            pr_err!(
                "refusing to unregister {:#x}: the site belongs to another module\n",
                addr
            );
            return Err(errno::not_owner());
        }
        if site.batch != 0 {
            pr_err!(
                "refusing to unregister {:#x}: a batch in flight owns it\n",
                addr
            );
            return Err(errno::busy());
        }
        self.retain(|s| s.addr != addr);
        Ok(())
    }

    /// Forgets every site of `owner`, a module that is going away (`MODULE_STATE_GOING`,
    /// after its exit function, or after its init failed). Returns how many there were.
    ///
    /// No batch can hold one of them: a batch pins the modules of its sites, and a module is
    /// only going once nobody holds it.
    pub(crate) fn forget_module(&mut self, owner: Module) -> usize {
        let before = self.list.len();
        self.retain(|s| s.owner != owner);
        before.saturating_sub(self.list.len())
    }

    /// Keeps the sites `keep` accepts, in order (6.12's `KVec` has no `retain`).
    fn retain(&mut self, keep: impl Fn(&Site) -> bool) {
        let mut kept = 0;
        for i in 0..self.list.len() {
            let Some(site) = self.list.get(i).copied() else {
                break;
            };
            if keep(&site) {
                if let Some(slot) = self.list.get_mut(kept) {
                    *slot = site;
                }
                kept += 1;
            }
        }
        // SAFETY: `kept` is at most the current length, and the elements dropped off the end
        // are `Copy` sites that need no destructor.
        unsafe { self.list.set_len(kept) };
    }

    /// Site `index`, or `EINVAL` with a log line: callers only pass indices `find` returned
    /// under the same lock, so a miss is a bug in the registry.
    pub(crate) fn get(&self, index: usize) -> Result<&Site> {
        self.list.get(index).ok_or_else(|| {
            pr_err!("site registry: index {index} out of range\n");
            EINVAL
        })
    }
}
