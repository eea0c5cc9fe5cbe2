//! The `build` workload: a real C code base built with `make -j2`, every object file and
//! binary checked against an unmanaged build of the same tree (the seeds' build
//! experiment: a kernel build under a memory cgroup).
//!
//! ```text
//!   source   Redis's Debian source (apt-get source redis: the release with Debian's
//!            patches), installed by .ci/setup-bench in /usr/local/src/uswap-bench/redis
//!            (--build-src): a real build system, make recursing into four bundled
//!            libraries and the server, 140 objects and 6 programs, 20-40 s unmanaged here
//!   tree     <scratch>/build/redis: a fresh copy (`cp -a`) before every run, the same path
//!            every time, so that the debug information in the objects is the same
//!   command  make -j2 MALLOC=libc          (--quick: make -j2 -C deps lua)
//!            SOURCE_DATE_EPOCH fixed (it sets redis's build id), MAKEFLAGS cleared
//!   verify   SHA-256 of every ELF file and ar archive in the tree after the build, against
//!            the unmanaged reference's: one missing, extra or different is a verify error
//!
//!   before the rounds (measure_reference):
//!     warm-up    the build once, unconfined and unmeasured: the compiler, make and the
//!                headers come into the page cache (a cgroup charges a cached page to
//!                whoever reads it first), as `warm_programs` does for the other workloads
//!     reference  the build again, unmanaged, measured as the uswap side is (a memory
//!                cgroup without a limit; where none can be made, its tree's VmRSS +
//!                VmPTE, sampled): its peak, times and outputs
//!     the two builds' outputs must be the same: otherwise the build is not reproducible
//!     here, nothing can be verified, and the comparison stops
//!     budget     the reference's peak / 2 for both sides (--budget overrides)
//! ```
//!
//! `MALLOC=libc`: the Debian patch that lets the package link the system's jemalloc renames
//! the bundled jemalloc's symbols whatever the flag says, so the bundled one cannot be
//! linked; glibc's malloc also spares the build a configure script that tests nothing
//! of interest here.
//!
//! The reference's peak is its cgroup's, which counts the page cache of the files the build
//! writes (about a third of it here) as well as the processes' memory: the budget is half
//! of what the machine gave the build, as a memory cgroup sees it.

use super::kernel_side::{swap_bytes, KernelEnv};
use super::outcome::RunOutcome;
use super::runner::{MemoryProbe, Sample};
use super::uswap_side;
use super::workloads::{self, Measured, Placement, RunContext, WorkloadKind, WorkloadSpec};
use anyhow::{bail, Context, Result};
use ring::digest::{digest, SHA256};
use std::collections::BTreeMap;
use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Arc;

/// Where .ci/setup-bench installs the source.
pub const DEFAULT_SOURCE: &str = "/usr/local/src/uswap-bench/redis";
/// make's jobs: the seeds' build runs one job per CPU of a 2-CPU machine.
const JOBS: u32 = 2;
/// Redis's build id and gcc's `__DATE__` follow it: every build the same.
const SOURCE_DATE_EPOCH: &str = "1700000000";
/// The largest output file read for its checksum (the server with debug information is
/// about 13 MiB).
const OUTPUT_MAX_BYTES: u64 = 1 << 30;

/// The build's settings, the same for every run of one comparison.
#[derive(Debug, Clone)]
pub struct BuildSetup {
    /// The pristine source tree (never built in).
    pub source: PathBuf,
    /// Where each run builds: the same path every time.
    pub tree: PathBuf,
    /// Build the small target (`--quick`).
    pub quick: bool,
    /// The unmanaged reference's outputs, once measured; the runs are verified against it.
    pub reference: Option<Arc<Outputs>>,
}

impl BuildSetup {
    pub fn new(source: PathBuf, scratch_dir: &Path, quick: bool) -> Self {
        BuildSetup { source, tree: scratch_dir.join("build/redis"), quick, reference: None }
    }

    /// Why the build cannot run here, if it cannot.
    pub fn missing(&self) -> Option<String> {
        for program in ["make", "cc"] {
            if workloads::find_on_path(program).is_none() {
                return Some(format!("{program} is not installed (.ci/setup-bench)"));
            }
        }
        if !self.source.join("Makefile").is_file() {
            return Some(format!(
                "no build source in {} (.ci/setup-bench installs it; --build-src)",
                self.source.display()
            ));
        }
        None
    }

    /// The make command line, run in [`BuildSetup::tree`].
    pub fn command(&self) -> Command {
        let mut command = Command::new("make");
        command.arg(format!("-j{JOBS}"));
        if self.quick {
            command.args(["-C", "deps"]);
        }
        command.arg("MALLOC=libc");
        if self.quick {
            command.arg("lua");
        }
        command.current_dir(&self.tree);
        command.env("SOURCE_DATE_EPOCH", SOURCE_DATE_EPOCH);
        for inherited in ["MAKEFLAGS", "MFLAGS", "MAKELEVEL", "CFLAGS", "LDFLAGS"] {
            command.env_remove(inherited);
        }
        command
    }

    /// The source's name and version from its Debian changelog (`redis 5:7.0.15-1~deb12u7`),
    /// or its directory's name.
    pub fn describe(&self) -> String {
        let changelog = std::fs::read_to_string(self.source.join("debian/changelog"));
        changelog.ok().and_then(|text| changelog_version(&text)).unwrap_or_else(|| {
            self.source.file_name().map_or("?".into(), |n| n.to_string_lossy().into_owned())
        })
    }
}

/// `redis 5:7.0.15-1~deb12u7` from a changelog's first line
/// (`redis (5:7.0.15-1~deb12u7) bookworm-security; urgency=medium`).
fn changelog_version(text: &str) -> Option<String> {
    let first = text.lines().next()?;
    let (name, rest) = first.split_once(" (")?;
    let (version, _) = rest.split_once(')')?;
    Some(format!("{name} {version}"))
}

/// The checksums of a build's outputs: every ELF file and ar archive under the tree, by
/// path relative to it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Outputs(pub BTreeMap<String, Vec<u8>>);

/// How a build's outputs compare with the reference's.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct OutputCheck {
    pub identical: usize,
    pub different: Vec<String>,
    pub missing: Vec<String>,
    pub extra: Vec<String>,
}

impl OutputCheck {
    /// Every file that is not as the reference's.
    pub fn errors(&self) -> u64 {
        (self.different.len() + self.missing.len() + self.extra.len()) as u64
    }

    /// One line for the report.
    pub fn describe(&self) -> String {
        if self.errors() == 0 {
            return format!(
                "{} objects and programs identical to the unmanaged build's",
                self.identical
            );
        }
        let mut parts = vec![format!("{} identical", self.identical)];
        for (what, files) in
            [("differ", &self.different), ("missing", &self.missing), ("extra", &self.extra)]
        {
            if !files.is_empty() {
                let shown: Vec<&str> = files.iter().take(3).map(String::as_str).collect();
                parts.push(format!("{} {what} ({})", files.len(), shown.join(", ")));
            }
        }
        format!("OUTPUTS NOT AS THE UNMANAGED BUILD'S: {}", parts.join(", "))
    }
}

impl Outputs {
    /// Checksums every output under `tree`.
    ///
    /// # Errors
    /// A directory or file that cannot be read, an output above 1 GiB.
    pub fn of_tree(tree: &Path) -> Result<Outputs> {
        let mut outputs = BTreeMap::new();
        let mut pending = vec![tree.to_path_buf()];
        while let Some(dir) = pending.pop() {
            for entry in std::fs::read_dir(&dir).with_context(|| format!("read {dir:?}"))? {
                let entry = entry?;
                let kind = entry.file_type()?;
                let path = entry.path();
                if kind.is_dir() {
                    pending.push(path);
                } else if kind.is_file() {
                    if let Some(sum) = output_checksum(&path)? {
                        let name = path.strip_prefix(tree).unwrap_or(&path);
                        outputs.insert(name.display().to_string(), sum);
                    }
                }
            }
        }
        Ok(Outputs(outputs))
    }

    /// `got` against these (the reference's).
    pub fn check(&self, got: &Outputs) -> OutputCheck {
        let mut check = OutputCheck::default();
        for (name, sum) in &self.0 {
            match got.0.get(name) {
                Some(other) if other == sum => check.identical += 1,
                Some(_) => check.different.push(name.clone()),
                None => check.missing.push(name.clone()),
            }
        }
        check.extra = got.0.keys().filter(|n| !self.0.contains_key(*n)).cloned().collect();
        check
    }
}

/// The SHA-256 of `path` if it is an output (an ELF file or an ar archive), else `None`.
fn output_checksum(path: &Path) -> Result<Option<Vec<u8>>> {
    let mut file = std::fs::File::open(path).with_context(|| format!("open {path:?}"))?;
    let mut magic = [0u8; 8];
    let mut got = 0;
    while got < magic.len() {
        match file.read(&mut magic[got..])? {
            0 => break,
            n => got += n,
        }
    }
    let is_output = magic[..got].starts_with(b"\x7fELF") || magic[..got] == *b"!<arch>\n";
    if !is_output {
        return Ok(None);
    }
    let len = file.metadata()?.len();
    if len > OUTPUT_MAX_BYTES {
        bail!("{path:?} is {len} bytes, more than an output of this build can be");
    }
    let data = std::fs::read(path).with_context(|| format!("read {path:?}"))?;
    Ok(Some(digest(&SHA256, &data).as_ref().to_vec()))
}

/// A fresh copy of `source` at `tree` (whatever was there removed first), modes and times
/// kept (`cp -a`), so that make sees the tree as it was shipped.
///
/// # Errors
/// The removal or the copy failed.
pub fn prepare_tree(source: &Path, tree: &Path) -> Result<()> {
    if tree.exists() {
        std::fs::remove_dir_all(tree).with_context(|| format!("remove {tree:?}"))?;
    }
    let parent = tree.parent().context("the build tree has no parent")?;
    std::fs::create_dir_all(parent).with_context(|| format!("create {parent:?}"))?;
    let output =
        Command::new("cp").arg("-a").arg(source).arg(tree).output().context("run cp -a")?;
    if !output.status.success() {
        bail!("cp -a {source:?} {tree:?}: {}", String::from_utf8_lossy(&output.stderr).trim());
    }
    Ok(())
}

/// Builds once under `placement` and checks the outputs against the reference, when there
/// is one; the outputs' checksums are in [`Measured::outputs`].
///
/// # Errors
/// The copy, make's failure (its exit status and the log's tail), unreadable outputs, an
/// interrupt, the time limit.
pub fn run(ctx: &RunContext, placement: &Placement<'_>) -> Result<Measured> {
    let setup = &ctx.build;
    prepare_tree(&setup.source, &setup.tree)?;
    let finished = workloads::spawn_measured("build", setup.command(), ctx, placement)?;
    let outputs = Outputs::of_tree(&setup.tree)?;
    let (verify_errors, detail) = match &setup.reference {
        Some(reference) => {
            let check = reference.check(&outputs);
            (check.errors(), check.describe())
        }
        None => (0, format!("{} objects and programs (the reference)", outputs.0.len())),
    };
    Ok(Measured {
        verify_errors,
        detail,
        outputs: Some(Arc::new(outputs)),
        ..Measured::of_tree(finished.wall_s, &finished.exit, finished.samples)
    })
}

/// Builds once, unconfined and unmeasured (the warm-up), and returns the outputs.
///
/// # Errors
/// As [`run`].
pub fn warm_up(ctx: &RunContext) -> Result<Arc<Outputs>> {
    struct Unmeasured;
    impl MemoryProbe for Unmeasured {
        fn sample(&self, _pid: u32) -> Sample {
            Sample::default()
        }
    }
    let placement = Placement { prepare: &|_| Ok(()), probe: &Unmeasured };
    let measured = run(ctx, &placement).context("the warm-up build")?;
    measured.outputs.context("the warm-up build left no outputs")
}

/// The reference and the warm-up must have built the same: otherwise nothing can be
/// verified (module essay).
///
/// # Errors
/// A sentence naming what differs.
pub fn check_reproducible(warm: &Outputs, reference: &Outputs) -> Result<()> {
    let check = warm.check(reference);
    if reference.0.is_empty() {
        bail!("the build left no object file or program to verify");
    }
    if check.errors() > 0 {
        bail!(
            "the build is not reproducible here (two unmanaged builds differ: {}), so its \
             outputs cannot be verified",
            check.describe()
        );
    }
    Ok(())
}

/// The unmanaged reference build (module essay) and the budget it sets.
pub struct Reference {
    pub outcome: RunOutcome,
    pub budget_bytes: u64,
    /// `--budget` set the budget, not the reference.
    pub budget_given: bool,
}

/// Runs the warm-up and the reference when `specs` has the build and it can run here, and
/// gives `ctx` the outputs to check every build against. `None` when there is nothing to
/// measure (the build's sides are then skipped with the reason).
///
/// Context: blocks for two builds (a minute or two); polls the interrupt flag.
pub fn reference_for(
    specs: &[WorkloadSpec],
    ctx: &mut RunContext,
    meter: Option<&KernelEnv>,
    budget: Option<u64>,
) -> Option<Result<Reference>> {
    let spec = specs.iter().find(|spec| spec.kind == WorkloadKind::Build)?;
    if spec.missing(ctx).is_some() {
        return None;
    }
    let result = measure_reference(spec, ctx, meter, budget);
    if let Ok(reference) = &result {
        ctx.build.reference.clone_from(&reference.outcome.measured.outputs);
    }
    Some(result)
}

fn measure_reference(
    spec: &WorkloadSpec,
    ctx: &RunContext,
    meter: Option<&KernelEnv>,
    budget: Option<u64>,
) -> Result<Reference> {
    let warm = warm_up(ctx)?;
    let outcome =
        uswap_side::measure_unmanaged(spec, ctx, meter).context("the unmanaged reference build")?;
    let outputs = outcome.measured.outputs.clone().context("the reference left no outputs")?;
    check_reproducible(&warm, &outputs)?;
    Ok(Reference {
        budget_bytes: budget.unwrap_or_else(|| half_in_mib(outcome.peak_bytes)),
        budget_given: budget.is_some(),
        outcome,
    })
}

/// Half of `peak_bytes`, rounded down to a whole MiB (at least one).
fn half_in_mib(peak_bytes: u64) -> u64 {
    ((peak_bytes / 2) >> 20).max(1) << 20
}

/// The context `spec` runs in: the build's budget is its reference's, and its size (which
/// sizes the swap devices) the reference's peak.
///
/// # Errors
/// The build's reference failed: the sentence its sides report.
pub fn context_for(
    spec: &WorkloadSpec,
    ctx: &RunContext,
    reference: Option<&Result<Reference>>,
) -> Result<RunContext, String> {
    let reference = match reference {
        Some(reference) if spec.kind == WorkloadKind::Build => reference,
        // Another workload, or a build that cannot run here (skipped with the reason).
        _ => return Ok(ctx.clone()),
    };
    let reference = reference.as_ref().map_err(|e| format!("the unmanaged build failed: {e:#}"))?;
    let size_bytes = reference.outcome.peak_bytes;
    Ok(RunContext {
        budget_bytes: reference.budget_bytes,
        size_bytes,
        uswap_pool_bytes: ctx.uswap_pool_bytes.map(|_| swap_bytes(size_bytes)),
        ..ctx.clone()
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn temp_dir(name: &str) -> PathBuf {
        let dir = std::env::temp_dir().join(format!("uswap-build-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        dir
    }

    #[test]
    fn the_make_command_line() {
        let setup = BuildSetup::new("/src/redis".into(), Path::new("/tmp/s"), false);
        let command = setup.command();
        let args: Vec<_> = command.get_args().map(|a| a.to_string_lossy().into_owned()).collect();
        assert_eq!(command.get_program(), "make");
        assert_eq!(args, ["-j2", "MALLOC=libc"]);
        assert_eq!(command.get_current_dir(), Some(Path::new("/tmp/s/build/redis")));
        let envs: BTreeMap<_, _> = command.get_envs().collect();
        assert_eq!(envs[std::ffi::OsStr::new("SOURCE_DATE_EPOCH")], Some("1700000000".as_ref()));
        assert_eq!(envs[std::ffi::OsStr::new("MAKEFLAGS")], None, "a caller's make flags go");
        let quick = BuildSetup { quick: true, ..setup };
        let args: Vec<_> =
            quick.command().get_args().map(|a| a.to_string_lossy().into_owned()).collect();
        assert_eq!(args, ["-j2", "-C", "deps", "MALLOC=libc", "lua"]);
    }

    #[test]
    fn the_build_runs_under_half_its_reference_peak() {
        assert_eq!(half_in_mib(301 << 20), 150 << 20);
        assert_eq!(half_in_mib(1000), 1 << 20, "never a budget of 0");
        let spec = parse("build");
        let mut ctx = RunContext::for_tests();
        ctx.uswap_pool_bytes = Some(1);
        let outcome = RunOutcome { peak_bytes: 200 << 20, ..RunOutcome::default() };
        let reference = Ok(Reference { outcome, budget_bytes: 100 << 20, budget_given: false });
        let build_ctx = context_for(&spec, &ctx, Some(&reference)).unwrap();
        assert_eq!(build_ctx.budget_bytes, 100 << 20);
        assert_eq!(build_ctx.size_bytes, 200 << 20);
        assert_eq!(build_ctx.uswap_pool_bytes, Some(swap_bytes(200 << 20)));
        // Other workloads keep the comparison's budget; a failed reference fails the build.
        let seq = context_for(&parse("seq"), &ctx, Some(&reference)).unwrap();
        assert_eq!(seq.budget_bytes, ctx.budget_bytes);
        let failed = Err(anyhow::anyhow!("make exited with status 2"));
        let why = context_for(&spec, &ctx, Some(&failed)).unwrap_err();
        assert!(why.contains("unmanaged build failed: make exited"), "{why}");
        assert_eq!(context_for(&spec, &ctx, None).unwrap().budget_bytes, ctx.budget_bytes);
    }

    fn parse(name: &str) -> WorkloadSpec {
        workloads::parse_workloads(name).unwrap().remove(0)
    }

    #[test]
    fn a_missing_source_is_named() {
        let setup = BuildSetup::new("/no/such/source".into(), Path::new("/tmp"), false);
        let why = setup.missing().unwrap();
        assert!(why.contains("/no/such/source") || why.contains("not installed"), "{why}");
        assert_eq!(setup.describe(), "source");
    }

    #[test]
    fn the_version_comes_from_the_changelog() {
        let text = "redis (5:7.0.15-1~deb12u7) bookworm-security; urgency=medium\n\n  * x\n";
        assert_eq!(changelog_version(text).unwrap(), "redis 5:7.0.15-1~deb12u7");
        assert_eq!(changelog_version("garbage"), None);
    }

    #[test]
    fn outputs_are_elf_files_and_archives_and_compare_by_content() {
        let dir = temp_dir("outputs");
        std::fs::create_dir_all(dir.join("src/sub")).unwrap();
        std::fs::write(dir.join("src/a.o"), b"\x7fELF\x02\x01\x01 object a").unwrap();
        std::fs::write(dir.join("src/sub/b.o"), b"\x7fELF\x02\x01\x01 object b").unwrap();
        std::fs::write(dir.join("libx.a"), b"!<arch>\nmembers").unwrap();
        std::fs::write(dir.join("src/a.c"), b"int main(void) { return 0; }").unwrap();
        std::fs::write(dir.join("short"), b"\x7f").unwrap();
        std::fs::write(dir.join("empty"), b"").unwrap();
        let reference = Outputs::of_tree(&dir).unwrap();
        let names: Vec<&str> = reference.0.keys().map(String::as_str).collect();
        assert_eq!(names, ["libx.a", "src/a.o", "src/sub/b.o"]);
        let same = reference.check(&Outputs::of_tree(&dir).unwrap());
        assert_eq!(same.errors(), 0);
        assert_eq!(same.identical, 3);
        assert!(same.describe().starts_with("3 objects and programs identical"));
        // One byte changed, one file gone, one new: three errors, each named.
        std::fs::write(dir.join("src/a.o"), b"\x7fELF\x02\x01\x01 object A").unwrap();
        std::fs::remove_file(dir.join("libx.a")).unwrap();
        std::fs::write(dir.join("src/c.o"), b"\x7fELF\x02\x01\x01 object c").unwrap();
        let check = reference.check(&Outputs::of_tree(&dir).unwrap());
        assert_eq!(check.different, ["src/a.o"]);
        assert_eq!(check.missing, ["libx.a"]);
        assert_eq!(check.extra, ["src/c.o"]);
        assert_eq!(check.errors(), 3);
        assert!(check.describe().contains("1 differ (src/a.o)"), "{}", check.describe());
        assert!(check_reproducible(&reference, &Outputs::of_tree(&dir).unwrap()).is_err());
        assert!(check_reproducible(&reference, &reference).is_ok());
        assert!(check_reproducible(&Outputs::default(), &Outputs::default()).is_err());
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn each_run_starts_from_a_fresh_copy() {
        let dir = temp_dir("tree");
        let source = dir.join("source");
        std::fs::create_dir_all(source.join("deps")).unwrap();
        std::fs::write(source.join("Makefile"), "all:\n").unwrap();
        std::fs::write(source.join("deps/x.c"), "int x;").unwrap();
        let tree = dir.join("scratch/build/redis");
        prepare_tree(&source, &tree).unwrap();
        std::fs::write(tree.join("deps/x.o"), b"\x7fELF left by a run").unwrap();
        prepare_tree(&source, &tree).unwrap();
        assert!(!tree.join("deps/x.o").exists(), "the last run's outputs are gone");
        assert_eq!(std::fs::read_to_string(tree.join("deps/x.c")).unwrap(), "int x;");
        let setup = BuildSetup { source: source.clone(), ..BuildSetup::new(source, &dir, true) };
        if workloads::find_on_path("make").is_some() && workloads::find_on_path("cc").is_some() {
            assert_eq!(setup.missing(), None);
        }
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
