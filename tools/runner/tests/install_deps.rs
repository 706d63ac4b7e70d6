//! Host tests of `tools/install-deps.sh` against simulated Debian bookworm machines.
//!
//! Each test builds a scratch directory holding one simulated machine: `bin/` has stub `id`,
//! `dpkg-query`, `dpkg`, `apt-get`, `apt-cache`, `rustup`, `cargo`, `bindgen` and `chown` that
//! read and update the machine's state under `state/` and append each call to `state/calls`;
//! `host/` links the few real tools the script and the stubs need (bash, coreutils, grep, awk,
//! sed). PATH is those two directories and nothing else, so no real dpkg, apt, rustup or cargo
//! can be reached at all, and HOME, TEXTPOKE_CACHE, TEXTPOKE_DEPS_ETC and TMPDIR point into the
//! scratch directory: nothing on the real machine is read or changed. A new external command in
//! the script fails these tests ("command not found") until it is stubbed here, or linked in
//! [`HOST_TOOLS`] if it cannot touch the machine.
//!
//! `TEXTPOKE_INSTALL_DEPS_SCRIPT` runs the tests against another copy of the script.

use std::fmt;
use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::Command;

/// The script's pinned kernel source version.
const PINNED: &str = "6.12.117-1~deb12u1";
/// What the archive offers instead once the pinned version is gone.
const CURRENT_SOURCE: &str = "6.12.130-1~deb12u1";
/// An older kernel source a machine may already have.
const OLDER_SOURCE: &str = "6.12.110-1~deb12u1";

/// The packages the script installs from bookworm, in its order.
const BASE: [&str; 18] = [
    "clang",
    "lld",
    "llvm",
    "libclang-dev",
    "flex",
    "bison",
    "bc",
    "libelf-dev",
    "libssl-dev",
    "cpio",
    "kmod",
    "busybox-static",
    "zstd",
    "xz-utils",
    "python3",
    "rsync",
    "file",
    "procps",
];

/// What the `test` profile adds to [`BASE`], in the same install: clang 19 for the kernels built
/// as distributions build them, OpenCSD's headers for the patched perf.
const TEST_ONLY: [&str; 5] = [
    "clang-19",
    "lld-19",
    "llvm-19",
    "libclang-19-dev",
    "libopencsd-dev",
];

const BOOKWORM: &str = "bookworm";
const BACKPORTS: &str = "bookworm-backports";

/// The archive: package, version and suite, oldest first per package.
const ARCHIVE: &[(&str, &str, &str)] = &[
    ("clang", "1:14.0-55.7~deb12u1", BOOKWORM),
    ("lld", "1:14.0-55.7~deb12u1", BOOKWORM),
    ("llvm", "1:14.0-55.7~deb12u1", BOOKWORM),
    ("libclang-dev", "1:14.0-55.7~deb12u1", BOOKWORM),
    ("flex", "2.6.4-8.2", BOOKWORM),
    ("bison", "2:3.8.2+dfsg-1+b1", BOOKWORM),
    ("bc", "1.07.1-3+b1", BOOKWORM),
    ("libelf-dev", "0.188-2.1", BOOKWORM),
    ("libssl-dev", "3.0.17-1~deb12u2", BOOKWORM),
    ("cpio", "2.13+dfsg-7.1", BOOKWORM),
    ("kmod", "30+20221128-1", BOOKWORM),
    ("busybox-static", "1:1.35.0-4+b3", BOOKWORM),
    ("zstd", "1.5.4+dfsg2-5", BOOKWORM),
    ("xz-utils", "5.4.1-1", BOOKWORM),
    ("python3", "3.11.2-1+b1", BOOKWORM),
    ("rsync", "3.2.7-1+deb12u2", BOOKWORM),
    ("file", "1:5.44-3", BOOKWORM),
    ("procps", "2:4.0.2-3", BOOKWORM),
    ("clang-19", "1:19.1.7-3~deb12u1", BOOKWORM),
    ("lld-19", "1:19.1.7-3~deb12u1", BOOKWORM),
    ("llvm-19", "1:19.1.7-3~deb12u1", BOOKWORM),
    ("libclang-19-dev", "1:19.1.7-3~deb12u1", BOOKWORM),
    ("libopencsd-dev", "1.3.3-1", BOOKWORM),
    ("linux-source-6.12", OLDER_SOURCE, BOOKWORM),
    ("linux-source-6.12", PINNED, BOOKWORM),
    ("qemu-system-x86", "1:7.2+dfsg-7+deb12u16", BOOKWORM),
    ("qemu-system-x86", "1:10.0.2+ds-1~bpo12+1", BACKPORTS),
    ("qemu-system-arm", "1:7.2+dfsg-7+deb12u16", BOOKWORM),
    ("qemu-system-arm", "1:10.0.2+ds-1~bpo12+1", BACKPORTS),
    ("linux-perf", "6.1.153-1", BOOKWORM),
    ("linux-perf", "6.12.38-1~bpo12+1", BACKPORTS),
];

/// The real tools linked into `host/`: what the script and the stubs run besides the stubs.
const HOST_TOOLS: &[&str] = &[
    "bash", "cat", "grep", "awk", "sed", "tail", "head", "mkdir", "dirname", "ls", "mktemp", "mv",
    "rm", "chmod",
];

/// The calls that change a machine; [`Run::changes`] keeps these.
const CHANGING: &[&str] = &[
    "apt-get update",
    "apt-get install",
    "apt-get download",
    "dpkg --add-architecture",
    "rustup component add",
    "rustup target add",
    "cargo install",
];

const UPDATE: &str = "apt-get update -qq";
const ADD_ARM64: &str = "dpkg --add-architecture arm64";
const DOWNLOAD: &str = "apt-get download -qq busybox-static:arm64";
const BUSYBOX_DEB: &str = "busybox-static_1.35.0-4+b3_arm64.deb";
const INSTALL_BINDGEN: &str = "cargo install --locked --quiet --version 0.72.1 bindgen-cli";
const INSTALL_FUZZ: &str = "cargo install --locked --quiet --force --version 0.13.2 cargo-fuzz";
const BPO: [&str; 3] = ["qemu-system-x86", "qemu-system-arm", "linux-perf"];
const COMPONENTS: [&str; 3] = ["rust-src", "rustfmt", "clippy"];
const TARGETS: [&str; 2] = ["x86_64-unknown-linux-musl", "aarch64-unknown-linux-musl"];

/// The prefix of every line the script prints on stderr when it gives up.
const PROG: &str = "tools/install-deps.sh:";

fn apt_install(pkgs: &[&str]) -> String {
    format!(
        "apt-get install -y -qq --no-install-recommends {}",
        pkgs.join(" ")
    )
}

fn apt_install_bpo(pkgs: &[&str]) -> String {
    apt_install(&[&["-t", BACKPORTS], pkgs].concat())
}

/// The packages a fresh machine gets from bookworm for `profile`, in one install.
fn base_for(profile: &str) -> Vec<&'static str> {
    let mut v = BASE.to_vec();
    if profile == "test" {
        v.extend(TEST_ONLY);
    }
    v
}

/// Everything a fresh machine gets, in order, for `profile`.
fn fresh_install(profile: &str) -> Vec<String> {
    let mut v = vec![
        ADD_ARM64.to_string(),
        UPDATE.to_string(),
        apt_install(&base_for(profile)),
        apt_install(&[&format!("linux-source-6.12={PINNED}")]),
        apt_install_bpo(&BPO),
        DOWNLOAD.to_string(),
    ];
    v.extend(COMPONENTS.map(|c| format!("rustup component add {c}")));
    v.extend(TARGETS.map(|t| format!("rustup target add {t}")));
    v.push(INSTALL_BINDGEN.to_string());
    if profile == "test" {
        v.push(INSTALL_FUZZ.to_string());
    }
    v
}

/// A simulated machine, as data.
#[derive(Clone)]
struct Machine {
    /// What `id -u` says.
    uid: u32,
    /// Installed packages and their versions.
    installed: Vec<(&'static str, &'static str)>,
    /// What the archive offers: package, version, suite, oldest first per package.
    archive: Vec<(&'static str, &'static str, &'static str)>,
    /// `apt-get update` fails (no network).
    fail_update: bool,
    /// Packages whose installation fails in dpkg.
    fail_install: Vec<&'static str>,
    /// rustup is on PATH.
    rustup: bool,
    /// Installed rustup components (short names) and targets besides the host's.
    components: Vec<&'static str>,
    targets: Vec<&'static str>,
    /// A bindgen already on PATH outside ~/.cargo/bin, and its version.
    system_bindgen: Option<&'static str>,
    /// bindgen 0.72.1 in ~/.cargo/bin.
    cargo_bindgen: bool,
    /// cargo-fuzz 0.13.2 is installed.
    cargo_fuzz: bool,
    /// dpkg has the arm64 foreign architecture.
    arm64: bool,
    /// An apt source for bookworm-backports exists.
    backports_source: bool,
    /// The arm64 busybox .deb is already in the cache.
    busybox_deb: bool,
    /// `apt-get download` succeeds without writing the .deb (an unplanned failure).
    download_writes_nothing: bool,
}

impl Machine {
    /// A fresh bookworm machine with rustup and nothing else of ours.
    fn fresh() -> Self {
        Self {
            uid: 0,
            installed: Vec::new(),
            archive: ARCHIVE.to_vec(),
            fail_update: false,
            fail_install: Vec::new(),
            rustup: true,
            components: Vec::new(),
            targets: Vec::new(),
            system_bindgen: None,
            cargo_bindgen: false,
            cargo_fuzz: false,
            arm64: false,
            backports_source: false,
            busybox_deb: false,
            download_writes_nothing: false,
        }
    }

    /// A machine with everything installed.
    fn complete() -> Self {
        Self {
            installed: complete_packages(),
            components: COMPONENTS.to_vec(),
            targets: TARGETS.to_vec(),
            cargo_bindgen: true,
            cargo_fuzz: true,
            arm64: true,
            backports_source: true,
            busybox_deb: true,
            ..Self::fresh()
        }
    }

    /// Sets the installed version of `pkg` (`None`: not installed).
    fn with(mut self, pkg: &'static str, version: Option<&'static str>) -> Self {
        self.installed.retain(|(p, _)| *p != pkg);
        if let Some(v) = version {
            self.installed.push((pkg, v));
        }
        self
    }

    /// The archive has `version` of linux-source-6.12 only.
    fn source_in_archive(mut self, version: &'static str) -> Self {
        self.archive.retain(|(p, _, _)| *p != "linux-source-6.12");
        self.archive.push(("linux-source-6.12", version, BOOKWORM));
        self
    }
}

/// Every package the script installs, at the version it ends up with.
fn complete_packages() -> Vec<(&'static str, &'static str)> {
    let mut v: Vec<(&str, &str)> = Vec::new();
    for &(p, ver, suite) in ARCHIVE {
        // Newest last: the bookworm-backports one for BPO, the pinned one for the source.
        if (p == "linux-source-6.12" && ver != PINNED) || (BPO.contains(&p) && suite != BACKPORTS) {
            continue;
        }
        v.push((p, ver));
    }
    v
}

fn sorted(mut v: Vec<(String, String)>) -> Vec<(String, String)> {
    v.sort();
    v
}

fn owned(v: &[(&str, &str)]) -> Vec<(String, String)> {
    sorted(
        v.iter()
            .map(|(a, b)| (a.to_string(), b.to_string()))
            .collect(),
    )
}

/// What every stub starts with: log the call; `unexpected` for a call it does not model.
const STUB_HEAD: &str = r#"#!/bin/bash
# Stub for tools/runner/tests/install_deps.rs: reads and updates the simulated machine.
S='@S@'
E='@E@'
NAME=${0##*/}
ARGS="$*"
printf '%s\n' "$NAME $ARGS" >>"$S/calls"
unexpected() {
	printf '%s\n' "$NAME $ARGS" >>"$S/unexpected"
	echo "stub $NAME: unexpected call: $NAME $ARGS" >&2
	exit 2
}
"#;

const ID: &str = r#"
[ "$ARGS" = -u ] || unexpected
cat "$S/uid"
"#;

const DPKG_QUERY: &str = r#"
[ $# = 3 ] && [ "$1" = -W ] && [ "$2" = '-f=${Status} ${Version}\n' ] || unexpected
v=$(awk -v n="$3" '$1 == n { print $2 }' "$S/installed")
if [ -z "$v" ]; then
	echo "dpkg-query: no packages found matching $3" >&2
	exit 1
fi
printf 'install ok installed %s\n' "$v"
"#;

const DPKG: &str = r#"
case "$ARGS" in
--print-foreign-architectures) cat "$S/foreign-archs" ;;
"--add-architecture arm64") echo arm64 >>"$S/foreign-archs" ;;
*) unexpected ;;
esac
"#;

/// `state/lists` is what the last `apt-get update` saw: `arch X` and `suite Y` lines.
const APT_GET: &str = r#"
visible() { grep -qx "$1" "$S/lists"; }
# The version apt installs of $1: $2 if given and offered, else the newest of suite $3, else
# the newest of bookworm. Backports count only if the lists know them.
candidate() {
	local bpo=0
	visible "suite bookworm-backports" && bpo=1
	awk -v n="$1" -v w="$2" -v t="$3" -v bpo="$bpo" '
		$1 != n || ($3 == "bookworm-backports" && !bpo) { next }
		w != "" { if ($2 == w) v = $2; next }
		$3 == t { tv = $2 }
		$3 == "bookworm" { bv = $2 }
		END { print (w != "" ? v : (tv != "" ? tv : bv)) }' "$S/archive"
}
case "$1" in
update)
	[ "$ARGS" = "update -qq" ] || unexpected
	if [ -e "$S/fail-update" ]; then
		echo "Err:1 http://deb.debian.org/debian bookworm InRelease"
		echo "  Temporary failure resolving 'deb.debian.org'"
		echo "E: Failed to fetch http://deb.debian.org/debian/dists/bookworm/InRelease  Temporary failure resolving 'deb.debian.org'" >&2
		exit 100
	fi
	{
		sed 's/^/arch /' "$S/foreign-archs"
		if grep -rqs bookworm-backports "$E/apt/sources.list" "$E/apt/sources.list.d/"; then
			echo "suite bookworm-backports"
		fi
	} >"$S/lists"
	;;
install)
	if [ "${DEBIAN_FRONTEND-}" != noninteractive ]; then
		echo "E: stub: apt-get install without DEBIAN_FRONTEND=noninteractive could prompt" >&2
		exit 100
	fi
	shift
	suite=bookworm
	pkgs=()
	while [ $# -gt 0 ]; do
		case $1 in
		-y | -qq | --no-install-recommends) ;;
		-t) suite=$2 && shift ;;
		-*) unexpected ;;
		*) pkgs+=("$1") ;;
		esac
		shift
	done
	[ ${#pkgs[@]} -gt 0 ] || unexpected
	if [ "$suite" != bookworm ] && ! visible "suite $suite"; then
		echo "E: The value '$suite' is invalid for APT::Default-Release as such a release is not available in the sources" >&2
		exit 100
	fi
	new=()
	for p in "${pkgs[@]}"; do
		name=${p%%=*}
		want=
		[ "$p" = "$name" ] || want=${p#*=}
		v=$(candidate "$name" "$want" "$suite")
		if [ -z "$v" ] && [ -n "$want" ]; then
			echo "E: Version '$want' for '$name' was not found" >&2
			exit 100
		elif [ -z "$v" ]; then
			echo "E: Unable to locate package $name" >&2
			exit 100
		fi
		new+=("$name $v")
	done
	for p in "${new[@]}"; do
		echo "Setting up $p ..."
		if grep -qx "${p%% *}" "$S/fail-install"; then
			echo "dpkg: error processing package ${p%% *} (--configure):" >&2
			echo "E: Sub-process /usr/bin/dpkg returned an error code (1)" >&2
			exit 100
		fi
	done
	for p in "${new[@]}"; do
		awk -v n="${p%% *}" '$1 != n' "$S/installed" >"$S/installed.new"
		echo "$p" >>"$S/installed.new"
		mv "$S/installed.new" "$S/installed"
	done
	;;
download)
	[ "$ARGS" = "download -qq busybox-static:arm64" ] || unexpected
	if ! visible "arch arm64"; then
		echo "E: Can't select candidate version from package busybox-static:arm64 as it has no candidate" >&2
		exit 100
	fi
	[ -e "$S/download-writes-nothing" ] || : >busybox-static_1.35.0-4+b3_arm64.deb
	;;
*) unexpected ;;
esac
"#;

const APT_CACHE: &str = r#"
[ $# = 2 ] && [ "$1" = show ] && [[ $2 == *=* ]] || unexpected
name=${2%%=*}
want=${2#*=}
bpo=0
grep -qx "suite bookworm-backports" "$S/lists" && bpo=1
if awk -v n="$name" -v w="$want" -v bpo="$bpo" '
	$1 == n && $2 == w && ($3 != "bookworm-backports" || bpo) { f = 1 }
	END { exit !f }' "$S/archive"; then
	printf 'Package: %s\nVersion: %s\n\n' "$name" "$want"
else
	echo "N: Unable to locate package $2" >&2
	echo "E: No packages found" >&2
	exit 100
fi
"#;

const RUSTUP: &str = r#"
case "$ARGS" in
"component list --installed") cat "$S/components" ;;
"target list --installed") cat "$S/targets" ;;
"component add "*)
	[ $# = 3 ] || unexpected
	case $3 in
	rust-src) echo rust-src ;;
	*) echo "$3-x86_64-unknown-linux-gnu" ;;
	esac >>"$S/components"
	;;
"target add "*)
	[ $# = 3 ] || unexpected
	echo "$3" >>"$S/targets"
	;;
*) unexpected ;;
esac
"#;

const CARGO: &str = r#"
case "$1" in
install)
	shift
	version=
	crate=
	while [ $# -gt 0 ]; do
		case $1 in
		--locked | --quiet | --force) ;;
		--version) version=$2 && shift ;;
		-*) unexpected ;;
		*) [ -z "$crate" ] || unexpected && crate=$1 ;;
		esac
		shift
	done
	[ -n "$version" ] || unexpected
	echo "   Compiling $crate v$version"
	case $crate in
	bindgen-cli)
		mkdir -p "$HOME/.cargo/bin"
		sed "s/@VERSION@/$version/" "$S/bindgen.template" >"$HOME/.cargo/bin/bindgen"
		chmod +x "$HOME/.cargo/bin/bindgen"
		;;
	cargo-fuzz) echo "$version" >"$S/cargo-fuzz" ;;
	*) unexpected ;;
	esac
	;;
fuzz)
	[ "$ARGS" = "fuzz --version" ] || unexpected
	if [ ! -e "$S/cargo-fuzz" ]; then
		echo "error: no such command: \`fuzz\`" >&2
		exit 101
	fi
	echo "cargo-fuzz $(cat "$S/cargo-fuzz")"
	;;
*) unexpected ;;
esac
"#;

/// A bindgen of version `@VERSION@` (the cargo stub fills it in).
const BINDGEN: &str = r#"
[ "$ARGS" = --version ] || unexpected
echo "bindgen @VERSION@"
"#;

const CHOWN: &str = r#"
[ $# = 2 ] && [ "$1" = _apt ] && [ -d "$2" ] || unexpected
"#;

/// The script under test: `TEXTPOKE_INSTALL_DEPS_SCRIPT`, else the repository's.
fn script() -> PathBuf {
    match std::env::var_os("TEXTPOKE_INSTALL_DEPS_SCRIPT") {
        Some(p) => PathBuf::from(p),
        None => Path::new(env!("CARGO_MANIFEST_DIR")).join("../install-deps.sh"),
    }
}

/// Where a real tool lives, looked up in the usual system directories only.
fn real_tool(name: &str) -> PathBuf {
    ["/usr/bin", "/bin"]
        .iter()
        .map(|d| Path::new(d).join(name))
        .find(|p| p.is_file())
        .unwrap_or_else(|| panic!("{name} not found in /usr/bin or /bin"))
}

fn write_exe(path: &Path, text: &str) {
    fs::create_dir_all(path.parent().unwrap()).unwrap();
    fs::write(path, text).unwrap();
    fs::set_permissions(path, fs::Permissions::from_mode(0o755)).unwrap();
}

fn lines(v: impl IntoIterator<Item = String>) -> String {
    v.into_iter().map(|l| l + "\n").collect()
}

/// A scratch directory holding one simulated machine; removed when the test passes.
struct Sim {
    dir: PathBuf,
}

impl Sim {
    fn new(test: &str, m: &Machine) -> Self {
        let dir = std::env::temp_dir().join(format!(
            "textpoke-install-deps-{}-{test}",
            std::process::id()
        ));
        let _ = fs::remove_dir_all(&dir);
        for d in [
            "bin",
            "host",
            "state",
            "etc/apt/sources.list.d",
            "home",
            "tmp",
            "work",
        ] {
            fs::create_dir_all(dir.join(d)).unwrap();
        }
        let s = Self { dir };
        let state = s.path("state");
        let etc = s.path("etc");
        for p in [&state, &etc] {
            let p = p.to_str().unwrap();
            assert!(!p.contains('\''), "{p}: a quote in the scratch path");
        }
        let head = STUB_HEAD
            .replace("@S@", state.to_str().unwrap())
            .replace("@E@", etc.to_str().unwrap());
        let stub =
            |name: &str, body: &str| write_exe(&s.path("bin").join(name), &(head.clone() + body));

        for t in HOST_TOOLS {
            std::os::unix::fs::symlink(real_tool(t), s.path("host").join(t)).unwrap();
        }
        stub("id", ID);
        stub("dpkg-query", DPKG_QUERY);
        stub("dpkg", DPKG);
        stub("apt-get", APT_GET);
        stub("apt-cache", APT_CACHE);
        stub("cargo", CARGO);
        stub("chown", CHOWN);
        if m.rustup {
            stub("rustup", RUSTUP);
        }
        let bindgen = head.clone() + BINDGEN;
        fs::write(state.join("bindgen.template"), &bindgen).unwrap();
        if let Some(v) = m.system_bindgen {
            write_exe(&s.path("bin/bindgen"), &bindgen.replace("@VERSION@", v));
        }
        if m.cargo_bindgen {
            write_exe(
                &s.path("home/.cargo/bin/bindgen"),
                &bindgen.replace("@VERSION@", "0.72.1"),
            );
        }

        let st = |name: &str, text: String| fs::write(state.join(name), text).unwrap();
        st("uid", format!("{}\n", m.uid));
        st(
            "installed",
            lines(m.installed.iter().map(|(p, v)| format!("{p} {v}"))),
        );
        st(
            "archive",
            lines(m.archive.iter().map(|(p, v, s)| format!("{p} {v} {s}"))),
        );
        st(
            "fail-install",
            lines(m.fail_install.iter().map(|p| p.to_string())),
        );
        if m.fail_update {
            st("fail-update", String::new());
        }
        if m.download_writes_nothing {
            st("download-writes-nothing", String::new());
        }
        let builtin = |c: &str| match c {
            "rust-src" => c.to_string(),
            _ => format!("{c}-x86_64-unknown-linux-gnu"),
        };
        let mut comps: Vec<String> = ["cargo", "rust-std", "rustc"].map(builtin).to_vec();
        comps.extend(m.components.iter().map(|c| builtin(c)));
        st("components", lines(comps));
        st(
            "targets",
            lines(
                std::iter::once("x86_64-unknown-linux-gnu")
                    .chain(m.targets.iter().copied())
                    .map(String::from),
            ),
        );
        if m.cargo_fuzz {
            st("cargo-fuzz", "0.13.2\n".into());
        }
        st(
            "foreign-archs",
            if m.arm64 {
                "arm64\n".into()
            } else {
                String::new()
            },
        );
        // The package lists as the machine's last apt-get update left them.
        let mut lists = String::new();
        if m.arm64 {
            lists += "arch arm64\n";
        }
        if m.backports_source {
            lists += "suite bookworm-backports\n";
        }
        st("lists", lists);

        let mut sources = "deb http://deb.debian.org/debian bookworm main\n".to_string();
        if m.backports_source {
            sources += "deb http://deb.debian.org/debian bookworm-backports main\n";
        }
        fs::write(etc.join("apt/sources.list"), sources).unwrap();
        if m.busybox_deb {
            let debs = s.path("cache/debs");
            fs::create_dir_all(&debs).unwrap();
            fs::write(debs.join(BUSYBOX_DEB), "").unwrap();
        }
        s
    }

    fn path(&self, rel: &str) -> PathBuf {
        self.dir.join(rel)
    }

    fn state(&self, name: &str) -> String {
        fs::read_to_string(self.path("state").join(name)).unwrap_or_default()
    }

    /// The machine's installed packages, sorted.
    fn installed(&self) -> Vec<(String, String)> {
        sorted(
            self.state("installed")
                .lines()
                .map(|l| {
                    let (p, v) = l.split_once(' ').unwrap();
                    (p.to_string(), v.to_string())
                })
                .collect(),
        )
    }

    /// Runs the script with `args` on this machine.
    fn run(&self, args: &[&str]) -> Run {
        fs::write(self.path("state/calls"), "").unwrap();
        fs::write(self.path("state/unexpected"), "").unwrap();
        let o = Command::new(script())
            .args(args)
            .env_clear()
            .env(
                "PATH",
                format!(
                    "{}:{}",
                    self.path("bin").display(),
                    self.path("host").display()
                ),
            )
            .env("HOME", self.path("home"))
            .env("TEXTPOKE_CACHE", self.path("cache"))
            .env("TEXTPOKE_DEPS_ETC", self.path("etc"))
            .env("TMPDIR", self.path("tmp"))
            .env("LC_ALL", "C")
            .current_dir(self.path("work"))
            .output()
            .unwrap_or_else(|e| panic!("{}: {e}", script().display()));
        let run = Run {
            dir: self.dir.clone(),
            args: args.join(" "),
            code: o.status.code(),
            stdout: String::from_utf8_lossy(&o.stdout).into_owned(),
            stderr: String::from_utf8_lossy(&o.stderr).into_owned(),
            calls: self.state("calls").lines().map(String::from).collect(),
        };
        let unexpected = self.state("unexpected");
        assert!(
            unexpected.is_empty(),
            "stubs called in a way they do not model:\n{unexpected}\n{run}"
        );
        // The guarantee that matters most: every way out but success says why.
        assert!(
            run.code == Some(0) || run.stderr.lines().any(|l| l.starts_with(PROG)),
            "a silent exit: status {:?} without a line starting with {PROG:?} on stderr\n{run}",
            run.code
        );
        let stray: Vec<_> = fs::read_dir(self.path("work")).unwrap().collect();
        assert!(
            stray.is_empty(),
            "files left in the working directory\n{run}"
        );
        run
    }

    fn apt_log(&self) -> String {
        self.path("cache/logs/apt.log").display().to_string()
    }
}

impl Drop for Sim {
    fn drop(&mut self) {
        if !std::thread::panicking() {
            let _ = fs::remove_dir_all(&self.dir);
        }
    }
}

/// One run of the script.
struct Run {
    dir: PathBuf,
    args: String,
    code: Option<i32>,
    stdout: String,
    stderr: String,
    /// Every stub call, `name args...`.
    calls: Vec<String>,
}

impl fmt::Display for Run {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "--- {} {} (machine kept in {})\nexit: {:?}\ncalls:\n{}stdout:\n{}stderr:\n{}",
            script().display(),
            self.args,
            self.dir.display(),
            self.code,
            lines(self.calls.iter().map(|c| format!("  {c}"))),
            self.stdout,
            self.stderr
        )
    }
}

impl Run {
    /// The calls that change the machine, in order.
    fn changes(&self) -> Vec<&str> {
        self.calls
            .iter()
            .map(String::as_str)
            .filter(|c| CHANGING.iter().any(|p| c.starts_with(p)))
            .collect()
    }

    fn assert_changes<S: AsRef<str>>(&self, expected: &[S]) {
        let expected: Vec<&str> = expected.iter().map(AsRef::as_ref).collect();
        assert_eq!(self.changes(), expected, "\n{self}");
    }

    fn assert_stdout_has(&self, line: &str) {
        assert!(
            self.stdout.lines().any(|l| l == line),
            "no line {line:?} on stdout\n{self}"
        );
    }

    /// Exit 0, the closing line, and no complaint.
    fn assert_ok(&self, profile: &str) {
        assert_eq!(self.code, Some(0), "\n{self}");
        assert_eq!(
            self.stdout.lines().last(),
            Some(format!("[deps] all dependencies present ({profile})").as_str()),
            "\n{self}"
        );
        assert!(!self.stderr.contains(PROG), "\n{self}");
    }

    /// A non-zero exit whose last word on stderr is the script's `message` line.
    fn assert_failed(&self, message: &str) {
        assert!(matches!(self.code, Some(c) if c != 0), "\n{self}");
        let last = self.stderr.lines().last().unwrap_or_default();
        assert!(
            last.starts_with(PROG),
            "the last line on stderr does not start with {PROG:?}\n{self}"
        );
        assert_eq!(last, format!("{PROG} {message}"), "\n{self}");
    }
}

/// Case 1: A fresh machine gets everything; a second run on the result changes nothing.
#[test]
fn fresh_machine_gets_everything_and_a_rerun_changes_nothing() {
    let sim = Sim::new("fresh", &Machine::fresh());
    let run = sim.run(&["test"]);
    run.assert_ok("test");
    run.assert_changes(&fresh_install("test"));
    let source = sim.path("etc/apt/sources.list.d/bookworm-backports.sources");
    run.assert_stdout_has(&format!(
        "[deps] adding bookworm-backports to {}",
        source.display()
    ));
    let text = fs::read_to_string(&source).unwrap();
    assert!(text.contains("Suites: bookworm-backports"), "{text}");
    assert_eq!(sim.installed(), owned(&complete_packages()), "\n{run}");
    assert!(
        sim.path("cache/debs").join(BUSYBOX_DEB).is_file(),
        "\n{run}"
    );
    assert!(sim.path("home/.cargo/bin/bindgen").is_file(), "\n{run}");
    assert_eq!(sim.state("cargo-fuzz"), "0.13.2\n");
    // apt's and cargo's chatter goes to the logs, not the terminal.
    assert!(!run.stdout.contains("Setting up"), "\n{run}");
    assert!(!run.stdout.contains("Compiling"), "\n{run}");
    let apt = fs::read_to_string(sim.apt_log()).unwrap();
    assert!(apt.contains("Setting up clang"), "{apt}");
    // mktemp's directory for the download is gone.
    assert_eq!(fs::read_dir(sim.path("tmp")).unwrap().count(), 0, "\n{run}");

    let again = sim.run(&["test"]);
    again.assert_ok("test");
    again.assert_changes::<&str>(&[]);
    assert_eq!(
        again.stdout, "[deps] all dependencies present (test)\n",
        "\n{again}"
    );
}

/// Case 2: A machine with everything: only checks, not even an apt-get update.
#[test]
fn complete_machine_changes_nothing() {
    let sim = Sim::new("complete", &Machine::complete());
    let run = sim.run(&["test"]);
    run.assert_ok("test");
    run.assert_changes::<&str>(&[]);
    assert_eq!(
        run.stdout, "[deps] all dependencies present (test)\n",
        "\n{run}"
    );
    assert_eq!(sim.installed(), owned(&complete_packages()));
}

/// Case 3: Half installed: only the missing pieces, each once; an outdated source gets the pinned
/// one, bookworm's QEMU the backport, an old bindgen on PATH the pinned one.
#[test]
fn half_installed_machine_gets_the_rest() {
    let mut m = Machine::complete()
        .with("llvm", None)
        .with("libclang-dev", None)
        .with("bc", None)
        .with("zstd", None)
        .with("file", None)
        .with("linux-source-6.12", Some(OLDER_SOURCE))
        .with("qemu-system-arm", Some("1:7.2+dfsg-7+deb12u16"))
        .with("linux-perf", None);
    m.components = vec!["rust-src", "rustfmt"];
    m.targets = vec!["x86_64-unknown-linux-musl"];
    m.cargo_bindgen = false;
    m.system_bindgen = Some("0.69.4");
    m.busybox_deb = false;
    let sim = Sim::new("half", &m);
    let run = sim.run(&["test"]);
    run.assert_ok("test");
    run.assert_changes(&[
        UPDATE.to_string(),
        apt_install(&["llvm", "libclang-dev", "bc", "zstd", "file"]),
        apt_install(&[&format!("linux-source-6.12={PINNED}")]),
        apt_install_bpo(&["qemu-system-arm", "linux-perf"]),
        DOWNLOAD.to_string(),
        "rustup component add clippy".to_string(),
        "rustup target add aarch64-unknown-linux-musl".to_string(),
        INSTALL_BINDGEN.to_string(),
    ]);
    assert_eq!(sim.installed(), owned(&complete_packages()), "\n{run}");
    assert!(
        sim.path("cache/debs").join(BUSYBOX_DEB).is_file(),
        "\n{run}"
    );
}

/// Case 4: The pinned source gone from the archive: the archive's current one. A rerun keeps it
/// (asking the archive again, since the pinned one is what it wants).
#[test]
fn pinned_source_gone_installs_the_current_one() {
    let m = Machine::complete()
        .with("linux-source-6.12", None)
        .source_in_archive(CURRENT_SOURCE);
    let sim = Sim::new("gone", &m);
    let run = sim.run(&["test"]);
    run.assert_ok("test");
    run.assert_changes(&[UPDATE.to_string(), apt_install(&["linux-source-6.12"])]);
    run.assert_stdout_has(&format!(
        "[deps] linux-source-6.12 {PINNED} is gone from the archive; installing the archive's current one"
    ));
    let want = m.with("linux-source-6.12", Some(CURRENT_SOURCE));
    assert_eq!(sim.installed(), owned(&want.installed), "\n{run}");

    let again = sim.run(&["test"]);
    again.assert_ok("test");
    again.assert_changes(&[UPDATE]);
    again.assert_stdout_has(&format!(
        "[deps] linux-source-6.12 {PINNED} is gone from the archive; keeping the installed {CURRENT_SOURCE}"
    ));
}

/// Case 4b: The pinned source gone, an older one installed: kept.
#[test]
fn pinned_source_gone_keeps_an_installed_one() {
    let m = Machine::complete()
        .with("linux-source-6.12", Some(OLDER_SOURCE))
        .source_in_archive(CURRENT_SOURCE);
    let sim = Sim::new("gone-keep", &m);
    let run = sim.run(&["test"]);
    run.assert_ok("test");
    run.assert_changes(&[UPDATE]);
    assert!(
        run.calls
            .contains(&format!("apt-cache show linux-source-6.12={PINNED}")),
        "\n{run}"
    );
    run.assert_stdout_has(&format!(
        "[deps] linux-source-6.12 {PINNED} is gone from the archive; keeping the installed {OLDER_SOURCE}"
    ));
    assert_eq!(sim.installed(), owned(&m.installed), "\n{run}");
}

/// Case 5: A failing apt-get install: named with its log, and nothing after it is tried.
#[test]
fn failing_apt_get_install_stops_with_its_log() {
    let mut m = Machine::fresh();
    m.fail_install = vec!["libclang-dev"];
    let sim = Sim::new("install-fails", &m);
    let run = sim.run(&["test"]);
    let install = apt_install(&base_for("test"));
    run.assert_failed(&format!(
        "apt-get install {} failed (log: {})",
        base_for("test").join(" "),
        sim.apt_log()
    ));
    run.assert_changes(&[ADD_ARM64, UPDATE, install.as_str()]);
    assert_eq!(run.calls.last(), Some(&install), "\n{run}");
    // The end of apt's log is shown.
    assert!(
        run.stderr
            .contains("E: Sub-process /usr/bin/dpkg returned an error code (1)"),
        "\n{run}"
    );
}

/// Case 6: A failing apt-get update: named with its log, and nothing after it is tried.
#[test]
fn failing_apt_get_update_stops_with_its_log() {
    let mut m = Machine::fresh();
    m.fail_update = true;
    let sim = Sim::new("update-fails", &m);
    let run = sim.run(&["test"]);
    run.assert_failed(&format!(
        "apt-get update failed (log: {}): check the network and {}/apt/sources.list*",
        sim.apt_log(),
        sim.path("etc").display()
    ));
    run.assert_changes(&[ADD_ARM64, UPDATE]);
    assert_eq!(
        run.calls.last().map(String::as_str),
        Some(UPDATE),
        "\n{run}"
    );
    assert!(
        run.stderr.contains("Temporary failure resolving"),
        "\n{run}"
    );
}

/// Case 7: Not root: refused before anything but `id`.
#[test]
fn non_root_is_refused_before_any_command() {
    let mut m = Machine::fresh();
    m.uid = 1000;
    let sim = Sim::new("not-root", &m);
    let run = sim.run(&["test"]);
    run.assert_failed("must run as root to install packages (try: sudo make ...)");
    assert_eq!(run.calls, ["id -u"], "\n{run}");
    assert!(!sim.path("cache").exists(), "\n{run}");
}

/// Case 8: `run` leaves cargo-fuzz and clang 19 out, `test` adds them; no profile means `run`.
#[test]
fn profile_run_skips_cargo_fuzz_and_test_adds_it() {
    let sim = Sim::new("profiles", &Machine::fresh());
    let run = sim.run(&["run"]);
    run.assert_ok("run");
    run.assert_changes(&fresh_install("run"));
    assert!(
        !run.calls.iter().any(|c| c.starts_with("cargo fuzz")),
        "\n{run}"
    );

    let default = sim.run(&[]);
    default.assert_ok("run");
    default.assert_changes::<&str>(&[]);

    let test = sim.run(&["test"]);
    test.assert_ok("test");
    test.assert_changes(&[
        UPDATE.to_string(),
        apt_install(&TEST_ONLY),
        INSTALL_FUZZ.to_string(),
    ]);
}

/// Case 9: An unknown profile: refused before any command.
#[test]
fn unknown_profile_is_refused() {
    let sim = Sim::new("unknown-profile", &Machine::complete());
    let run = sim.run(&["bench"]);
    run.assert_failed("unknown profile 'bench' (run or test)");
    assert!(run.calls.is_empty(), "\n{run}");
}

/// Case 10: No rustup on PATH: says it is required.
#[test]
fn missing_rustup_is_named() {
    let mut m = Machine::complete();
    m.rustup = false;
    let sim = Sim::new("no-rustup", &m);
    let run = sim.run(&["test"]);
    run.assert_failed(
        "rustup is required (the machine's Rust toolchain): install it from https://rustup.rs",
    );
    run.assert_changes::<&str>(&[]);
    assert!(!run.calls.iter().any(|c| c.starts_with("cargo")), "\n{run}");
}

/// Case 11: A failure no step planned for (apt-get download "succeeds" without the .deb): the ERR
/// trap names the command that failed.
#[test]
fn unplanned_failure_is_named_by_the_err_trap() {
    let mut m = Machine::complete();
    m.busybox_deb = false;
    m.download_writes_nothing = true;
    let sim = Sim::new("err-trap", &m);
    let run = sim.run(&["test"]);
    assert!(matches!(run.code, Some(c) if c != 0), "\n{run}");
    let last = run.stderr.lines().last().unwrap_or_default();
    assert!(
        last.starts_with(&format!("{PROG} line "))
            && last.contains("`mv ")
            && last.ends_with("failed (exit 1); stopping here"),
        "\n{run}"
    );
    run.assert_changes(&[UPDATE, DOWNLOAD]);
}
