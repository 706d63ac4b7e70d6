// SPDX-License-Identifier: GPL-2.0

//! debugfs directories whose files are backed by Rust objects (6.12 has no Rust debugfs).
//!
//! A file's content is generated when it is opened, so a reader sees one consistent snapshot
//! however it splits its reads; each write is handed over whole as one command, and the
//! command's error becomes `write()`'s errno. Every file requires `CAP_SYS_ADMIN` on top of
//! debugfs' own root-only mount.
//!
//! C header: [`include/linux/debugfs.h`](srctree/include/linux/debugfs.h).

use core::marker::PhantomData;
use kernel::{
    bindings,
    ffi::{c_char, c_int, c_void},
    prelude::*,
    str::CStr,
    sync::Arc,
    uaccess::UserSlice,
    ThisModule,
};

/// A `struct dentry *`, opaque here: this module only passes it back to debugfs.
type Dentry = *mut c_void;

extern "C" {
    fn debugfs_create_dir(name: *const c_char, parent: Dentry) -> Dentry;
    fn debugfs_create_file(
        name: *const c_char,
        mode: bindings::umode_t,
        parent: Dentry,
        data: *mut c_void,
        fops: *const c_void,
    ) -> Dentry;
    fn debugfs_remove(dentry: Dentry);
}

/// The longest command a write may carry.
const MAX_COMMAND: usize = 4096;

/// What a debugfs file does.
pub(crate) trait File: Send + Sync + 'static {
    /// The content a reader sees, generated when the file is opened for reading.
    ///
    /// `KVVec` falls back to vmalloc, so large binary logs are fine.
    fn snapshot(&self) -> Result<KVVec<u8>> {
        Ok(KVVec::new())
    }

    /// Handles one write; the default refuses writes with `EINVAL`.
    fn command(&self, _data: &[u8]) -> Result {
        Err(EINVAL)
    }
}

/// A file's backing object and operations, kept until the directory is removed.
struct Backing {
    data: *const c_void,
    release: unsafe fn(*const c_void),
    _fops: KBox<bindings::file_operations>,
}

/// A debugfs directory; removing it (on drop) removes its files and waits for their users.
pub(crate) struct Dir {
    dentry: Dentry,
    module: *mut bindings::module,
    files: KVec<Backing>,
}

// SAFETY: The dentry and module pointers are only passed to thread-safe debugfs functions, and
// the backing objects are `Send + Sync` (`File` requires it).
unsafe impl Send for Dir {}
// SAFETY: As above; `&Dir` offers no access to anything.
unsafe impl Sync for Dir {}

impl Dir {
    /// Creates `/sys/kernel/debug/<name>`, owned by `module`.
    pub(crate) fn new(name: &CStr, module: &ThisModule) -> Result<Self> {
        // SAFETY: `name` is NUL-terminated; a null parent means the debugfs root.
        let dentry = unsafe { debugfs_create_dir(name.as_char_ptr(), core::ptr::null_mut()) };
        if dentry.is_null() || kernel::error::from_err_ptr(dentry).is_err() {
            return Err(ENODEV);
        }
        Ok(Self {
            dentry,
            module: module.as_ptr(),
            files: KVec::new(),
        })
    }

    /// Adds a file `name` with permissions `mode` (e.g. `0o400`), served by `file`.
    pub(crate) fn add<T: File>(&mut self, name: &CStr, mode: u16, file: Arc<T>) -> Result {
        let fops = KBox::new(Fops::<T>::vtable(self.module), GFP_KERNEL)?;
        self.files.reserve(1, GFP_KERNEL)?;
        let data = Arc::into_raw(file).cast::<c_void>();
        // SAFETY: `name` is NUL-terminated, `self.dentry` is our directory, and `data` and
        // `fops` stay alive until `drop` has removed the directory (they are kept in `files`).
        let dentry = unsafe {
            debugfs_create_file(
                name.as_char_ptr(),
                mode,
                self.dentry,
                data.cast_mut(),
                (&raw const *fops).cast::<c_void>(),
            )
        };
        let backing = Backing {
            data,
            release: release_arc::<T>,
            _fops: fops,
        };
        // Capacity was reserved above, so this cannot fail and leak the reference.
        self.files.push(backing, GFP_KERNEL)?;
        if dentry.is_null() || kernel::error::from_err_ptr(dentry).is_err() {
            return Err(ENODEV);
        }
        Ok(())
    }
}

impl Drop for Dir {
    fn drop(&mut self) {
        // SAFETY: `self.dentry` is our directory. Removal is recursive and waits for every
        // in-progress file operation (debugfs' file proxy), so no callback can run afterwards.
        unsafe { debugfs_remove(self.dentry) };
        for f in self.files.iter() {
            // SAFETY: Each backing object was created by `Arc::into_raw` for exactly this type
            // and is released once, after the last callback that could use it.
            unsafe { (f.release)(f.data) };
        }
    }
}

/// Drops the `Arc<T>` whose raw pointer is `data`.
///
/// # Safety
///
/// `data` must come from `Arc::<T>::into_raw` and not be used afterwards.
unsafe fn release_arc<T: File>(data: *const c_void) {
    // SAFETY: Guaranteed by the caller.
    drop(unsafe { Arc::from_raw(data.cast::<T>()) });
}

/// The `file_operations` serving a `T`.
struct Fops<T>(PhantomData<T>);

impl<T: File> Fops<T> {
    fn vtable(module: *mut bindings::module) -> bindings::file_operations {
        bindings::file_operations {
            owner: module,
            open: Some(Self::open),
            read: Some(Self::read),
            write: Some(Self::write),
            release: Some(Self::release),
            llseek: Some(bindings::default_llseek),
            ..Default::default()
        }
    }

    /// The backing object of an open file.
    ///
    /// # Safety
    ///
    /// `inode` must be one of our debugfs files (its `i_private` is an `Arc<T>` raw pointer
    /// that outlives every file operation).
    unsafe fn backing<'a>(inode: *mut bindings::inode) -> &'a T {
        // SAFETY: Guaranteed by the caller.
        unsafe { &*(*inode).i_private.cast::<T>() }
    }

    /// `open`: builds the snapshot a reader will see.
    ///
    /// # Safety
    ///
    /// Called by the VFS with a valid inode of one of our files and the file being opened.
    unsafe extern "C" fn open(inode: *mut bindings::inode, file: *mut bindings::file) -> c_int {
        // SAFETY: `capable` only inspects the current task's credentials.
        if !unsafe { bindings::capable(bindings::CAP_SYS_ADMIN as c_int) } {
            return EPERM.to_errno();
        }
        // SAFETY: VFS passes a valid open file.
        let readable = unsafe { (*file).f_flags } & bindings::O_ACCMODE != bindings::O_WRONLY;
        let content = if readable {
            // SAFETY: debugfs calls us only for inodes we created, with our `Arc<T>`.
            match unsafe { Self::backing(inode) }.snapshot() {
                Ok(c) => c,
                Err(e) => return e.to_errno(),
            }
        } else {
            KVVec::new()
        };
        match KBox::new(content, GFP_KERNEL) {
            Ok(b) => {
                // SAFETY: `file` is valid; `release` frees what we store here.
                unsafe { (*file).private_data = KBox::into_raw(b).cast::<c_void>() };
                0
            }
            Err(_) => ENOMEM.to_errno(),
        }
    }

    /// `read`: copies from the snapshot.
    ///
    /// # Safety
    ///
    /// Called by the VFS on a file `open` succeeded for, with a user buffer of `count` bytes.
    unsafe extern "C" fn read(
        file: *mut bindings::file,
        buf: *mut c_char,
        count: usize,
        pos: *mut bindings::loff_t,
    ) -> isize {
        // SAFETY: `open` stored a live `KVVec<u8>` in `private_data`; it is freed in `release`.
        let content = unsafe { &*(*file).private_data.cast::<KVVec<u8>>() };
        // SAFETY: `buf`/`count`/`pos` come from the VFS; the source is our own buffer.
        unsafe {
            bindings::simple_read_from_buffer(
                buf.cast::<c_void>(),
                count,
                pos,
                content.as_ptr().cast::<c_void>(),
                content.len(),
            )
        }
    }

    /// `write`: hands the written bytes to the file as one command.
    ///
    /// # Safety
    ///
    /// Called by the VFS on a file `open` succeeded for, with a user buffer of `count` bytes.
    unsafe extern "C" fn write(
        file: *mut bindings::file,
        buf: *const c_char,
        count: usize,
        _pos: *mut bindings::loff_t,
    ) -> isize {
        if count > MAX_COMMAND {
            return E2BIG.to_errno() as isize;
        }
        let mut data = KVec::new();
        if data.reserve(count, GFP_KERNEL).is_err() {
            return ENOMEM.to_errno() as isize;
        }
        let reader = UserSlice::new(buf as usize, count).reader();
        if let Err(e) = reader.read_all(&mut data, GFP_KERNEL) {
            return e.to_errno() as isize;
        }
        // SAFETY: `file` is one of our open files, so its inode is one of ours.
        let backing = unsafe { Self::backing((*file).f_inode) };
        match backing.command(&data) {
            Ok(()) => count as isize,
            Err(e) => e.to_errno() as isize,
        }
    }

    /// `release`: frees the snapshot.
    ///
    /// # Safety
    ///
    /// Called by the VFS once per successful `open`, after the last operation on the file.
    unsafe extern "C" fn release(_inode: *mut bindings::inode, file: *mut bindings::file) -> c_int {
        // SAFETY: `open` stored this box and nothing uses it after release.
        drop(unsafe { KBox::from_raw((*file).private_data.cast::<KVVec<u8>>()) });
        0
    }
}

/// A command without the surrounding whitespace (`echo` adds a newline).
pub(crate) fn trim(mut bytes: &[u8]) -> &[u8] {
    while let [first, rest @ ..] = bytes {
        if !first.is_ascii_whitespace() {
            break;
        }
        bytes = rest;
    }
    while let [rest @ .., last] = bytes {
        if !last.is_ascii_whitespace() {
            break;
        }
        bytes = rest;
    }
    bytes
}

/// A `core::fmt::Write` sink for building text snapshots.
pub(crate) struct Text(pub(crate) KVVec<u8>);

impl Text {
    /// An empty text.
    pub(crate) fn new() -> Self {
        Self(KVVec::new())
    }
}

impl core::fmt::Write for Text {
    fn write_str(&mut self, s: &str) -> core::fmt::Result {
        self.0
            .extend_from_slice(s.as_bytes(), GFP_KERNEL)
            .map_err(|_| core::fmt::Error)
    }
}
