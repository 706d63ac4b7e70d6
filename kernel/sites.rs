// SPDX-License-Identifier: GPL-2.0

//! The registry of patchable sites: the only addresses the engine will ever write.
//!
//! A module declares each site of its own text once, with the instruction it holds. From then
//! on a batch can only name registered sites by their exact address, so the engine never
//! becomes a way to write arbitrary kernel memory: not for another module, and not for
//! userspace, which reaches it only through a sample's site indices.
//!
//! Sites are kept sorted by address; a site is owned by at most one batch at a time.

use crate::arch;
use crate::errno;
use crate::insn::{InsnBytes, MAX_INSN_LEN};
use crate::kernel_text;
use crate::module_text::Module;
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

    /// Site `index`, mutably.
    pub(crate) fn get_mut(&mut self, index: usize) -> Option<&mut Site> {
        self.list.get_mut(index)
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

    /// Registers the `len`-byte site at `addr` in `owner`'s text.
    ///
    /// Refuses (see [`crate::errno`]) the engine's own text, addresses outside the owner's core
    /// text, overlaps with registered sites, and instructions the codec cannot decode as exactly
    /// `len` bytes.
    pub(crate) fn register(&mut self, owner: Module, addr: u64, len: usize) -> Result {
        if owner == self.engine || self.engine.text_contains(addr, 1) {
            pr_err!(
                "refusing site {:#x}: it is in textpoke's own text (the trap path)\n",
                addr
            );
            return Err(errno::engine_text());
        }
        if len == 0 || len > MAX_INSN_LEN || !owner.text_contains(addr, len as u64) {
            pr_err!(
                "refusing site {:#x}+{}: not inside its module's text\n",
                addr,
                len
            );
            return Err(errno::outside_text());
        }
        let mut buf = [0u8; MAX_INSN_LEN];
        let bytes = buf.get_mut(..len).ok_or(errno::wrong_size())?;
        kernel_text::read(addr, bytes)?;
        arch::Insn::decode(addr, bytes).map_err(|e| {
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
    /// Refuses unknown sites, sites of another module (`EPERM`) and sites a batch owns.
    pub(crate) fn unregister(&mut self, owner: Module, addr: u64) -> Result {
        let Found::Site(i) = self.find(addr) else {
            return Err(errno::not_registered());
        };
        let site = self.list.get(i).ok_or(errno::not_registered())?;
        if site.owner != owner {
            return Err(EPERM);
        }
        if site.batch != 0 {
            return Err(errno::busy());
        }
        if let Some(tail) = self.list.get_mut(i..) {
            tail.rotate_left(1);
        }
        let len = self.list.len().saturating_sub(1);
        // SAFETY: `len` is below the current length, and the element dropped off the end is the
        // unregistered site, which is `Copy` and needs no destructor.
        unsafe { self.list.set_len(len) };
        Ok(())
    }
}
