//! Running many seeds: seed selection from the environment, one process per
//! seed, and the determinism check.
//!
//! Why a process per seed: madsim makes time, the network, std's hashers
//! and `getrandom` deterministic per runtime, but tokio's `select!` and
//! `sync::watch` draw from a per-thread rng that tokio seeds with a
//! *process-global* counter (`tokio::loom::std::rand::seed`). In one process
//! the n-th seed thread therefore behaves differently from the same seed run
//! first, so a failure found in a batch would not replay alone (and madsim's
//! in-process `Runtime::check_determinism`, which runs twice in one process,
//! reports false non-determinism). A seed in a fresh process is always the
//! first tokio user there, so a batch run and a replay are the same run.
//!
//! The test binary re-runs itself: the parent test spawns
//! `<test binary> <child test> --exact` with `KAAS_SIM_CHILD_SEED=n`, and the
//! child test (a no-op without that variable) runs the seed and prints one
//! result line.
//!
//! Environment:
//! - `MADSIM_TEST_SEED=n` (or `KAAS_SIM_SEED=n`): start at seed n; alone, it
//!   replays exactly that seed.
//! - `KAAS_SIM_SEEDS=k` (or `MADSIM_TEST_NUM=k`): run k seeds.
//! - `KAAS_SIM_JOBS=j`: seeds run in parallel (default: available cores).
//! - `KAAS_SIM_VERBOSE=1`: print each seed's report line as it finishes
//!   (otherwise a progress line every twentieth of the batch, and the
//!   summary table of [`crate::batch`] at the end).
//! - `MADSIM_TEST_CHECK_DETERMINISM=1`: run every seed twice and compare.
//! - `KAAS_SIM_LOG=filter` (e.g. `info`, `kaas_net=debug`, `kaas_sim=debug`
//!   for the workload's own events): tracing output, with simulated
//!   timestamps; best with `scripts/sim --seed n`.
//! - `KAAS_SIM_SEED_TIMEOUT_SECS=s`: real time after which a seed's process
//!   is killed and the seed reported hung (default 300).
//! - `KAAS_SIM_LISTING_CACHE_MS=ms`: how stale each broker's directory
//!   listings may be in multi-broker seeds, instead of the seed's draw; set
//!   above the 300 ms staleness bound, it breaks what the brokers assume
//!   (a mutation run).
//! - `KAAS_SIM_ATTR_CACHE_MS=ms`: how long after another broker replaced a
//!   file by a rename each broker that looked its name up before may still
//!   read the old version, in multi-broker seeds, instead of the seed's
//!   draw; above the 300 ms staleness bound, another mutation run.
//! - `KAAS_SIM_BUGGIFY=off`: no buggify point fires in any seed (to tell
//!   whether a failure needs them; `crate::buggify`).
//! - `KAAS_SIM_TEAR_AT_POINTS=0`: a crash a buggify point asks for no
//!   longer tears, half the time, each file's latest write inside itself
//!   (`SimVolume::crash_tearing_last_writes`).
//! - `KAAS_SIM_BUG=name`: plant that one of `kaas_core::deliberate_bugs` in
//!   every seed's process (a build with the `deliberate-bugs` feature:
//!   `scripts/sim --bug NAME`, `scripts/sim-bugs`).
//! - `KAAS_SIM_STOP_AT_FAILURE=1`: take no new seed once one failed; the
//!   seeds already running finish, so every seed below the lowest failing
//!   one has run (the bug hunt's "seeds to the first failure").

use crate::batch::{
    decode_counts, decode_list, encode_counts, encode_list, BatchSummary, SeedCounts,
};
use crate::harness::run_seed;
use kaas_core::coverage;
use madsim::runtime::Runtime;
use madsim::Config;
use std::io::Read;
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

/// A run that has not finished after this much simulated time is hung.
const TIME_LIMIT: Duration = Duration::from_secs(900);
/// Tells the child test which seed to run.
pub const CHILD_ENV: &str = "KAAS_SIM_CHILD_SEED";
/// Real time a seed may take before it counts as hung (a task spinning at
/// one simulated instant never reaches the simulated time limit).
/// `KAAS_SIM_SEED_TIMEOUT_SECS` overrides.
const SEED_DEADLINE: Duration = Duration::from_secs(300);
/// Prefix of the child's result line.
const PASS_PREFIX: &str = "KAAS_SIM_PASS ";
/// Prefixes of the child's counters and coverage marks lines.
const TALLY_PREFIX: &str = "KAAS_SIM_TALLY ";
const MARKS_PREFIX: &str = "KAAS_SIM_MARKS ";
const VACUOUS_PREFIX: &str = "KAAS_SIM_VACUOUS ";

/// Which seeds to run.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Selection {
    pub seeds: Vec<u64>,
    pub check_determinism: bool,
    pub jobs: usize,
    /// Print every seed's report line, not just progress.
    pub verbose: bool,
    /// Take no new seed once one failed (`KAAS_SIM_STOP_AT_FAILURE`).
    pub stop_at_failure: bool,
}

fn env_u64(names: &[&str]) -> Option<u64> {
    names
        .iter()
        .find_map(|n| std::env::var(n).ok())
        .and_then(|v| v.trim().parse().ok())
}

/// The seed named by `MADSIM_TEST_SEED` or `KAAS_SIM_SEED`, if any.
pub fn explicit_seed() -> Option<u64> {
    env_u64(&["MADSIM_TEST_SEED", "KAAS_SIM_SEED"])
}

impl Selection {
    /// No seed base and no seed count were asked for: the default batch.
    pub fn is_default() -> bool {
        explicit_seed().is_none() && env_u64(&["KAAS_SIM_SEEDS", "MADSIM_TEST_NUM"]).is_none()
    }

    /// Seeds from the environment; without any, `default_count` seeds
    /// from 0 (fixed, so CI is reproducible; pass a base to explore).
    pub fn from_env(default_count: u64) -> Selection {
        let base = explicit_seed();
        let count = env_u64(&["KAAS_SIM_SEEDS", "MADSIM_TEST_NUM"]).unwrap_or(if base.is_some() {
            1
        } else {
            default_count
        });
        let base = base.unwrap_or(0);
        let jobs = env_u64(&["KAAS_SIM_JOBS"])
            .map(|j| j as usize)
            .unwrap_or_else(|| std::thread::available_parallelism().map_or(1, |n| n.get()))
            .max(1);
        Selection {
            seeds: (base..base.saturating_add(count)).collect(),
            check_determinism: std::env::var_os("MADSIM_TEST_CHECK_DETERMINISM").is_some(),
            jobs,
            verbose: std::env::var_os("KAAS_SIM_VERBOSE").is_some(),
            stop_at_failure: std::env::var_os("KAAS_SIM_STOP_AT_FAILURE").is_some(),
        }
    }
}

/// How one seed ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    /// The seed's one-line report (everything in it is simulated, so two
    /// runs of a seed print the same line), and its counters and coverage
    /// marks (as deterministic).
    Passed(String, SeedCounts),
    /// Why it failed: violations, a panic, or the child's whole output.
    Failed(String),
}

/// The command that replays `seed` (with the planted bug, if any).
pub fn replay_command(seed: u64) -> String {
    match std::env::var(BUG_ENV) {
        Ok(bug) => format!("scripts/sim --bug {bug} --seed {seed}"),
        Err(_) => format!("scripts/sim --seed {seed}"),
    }
}

/// Names the deliberate bug to plant in every seed's process.
pub const BUG_ENV: &str = "KAAS_SIM_BUG";

/// Plants the bug [`BUG_ENV`] names, if it names one. Err: it names no
/// bug, or this build cannot plant bugs (built without the
/// `deliberate-bugs` feature): the seed must not pass as if it had run
/// with the bug.
pub fn plant_bug_from_env() -> Result<(), String> {
    use kaas_core::deliberate_bugs::{Bug, AVAILABLE};
    let Ok(name) = std::env::var(BUG_ENV) else {
        return Ok(());
    };
    let Some(bug) = Bug::from_name(&name) else {
        let names: Vec<&str> = Bug::ALL.iter().map(|b| b.name()).collect();
        return Err(format!(
            "{BUG_ENV}={name} names no deliberate bug; there are: {}",
            names.join(", ")
        ));
    };
    if !AVAILABLE {
        return Err(format!(
            "{BUG_ENV}={name}, but this build has no deliberate bugs: build with the \
             `deliberate-bugs` feature (scripts/sim --bug {name})"
        ));
    }
    #[cfg(feature = "deliberate-bugs")]
    kaas_core::deliberate_bugs::plant(bug);
    #[cfg(not(feature = "deliberate-bugs"))]
    let _ = bug;
    Ok(())
}

fn init_logging() {
    if let Ok(filter) = std::env::var("KAAS_SIM_LOG") {
        let _ = tracing_subscriber::fmt()
            .with_env_filter(tracing_subscriber::EnvFilter::new(filter))
            .with_test_writer()
            .try_init();
    }
}

fn panic_message(payload: Box<dyn std::any::Any + Send>) -> String {
    payload
        .downcast_ref::<String>()
        .cloned()
        .or_else(|| payload.downcast_ref::<&str>().map(|s| s.to_string()))
        .unwrap_or_else(|| "panic with a non-string payload".into())
}

/// Runs `seed` in this process, on a fresh thread with a fresh runtime.
/// Replays exactly only as the first seed of a process (see the module
/// docs); [`run_isolated`] arranges that.
pub fn run_in_process(seed: u64) -> Outcome {
    init_logging();
    if let Err(why) = plant_bug_from_env() {
        return Outcome::Failed(format!("seed {seed}: {why}"));
    }
    let thread = std::thread::Builder::new()
        .name(format!("sim-seed-{seed}"))
        .spawn(move || {
            let mut runtime = Runtime::with_seed_and_config(seed, Config::default());
            runtime.set_time_limit(TIME_LIMIT);
            runtime.block_on(run_seed())
        });
    match thread.map(|t| t.join()) {
        Ok(Ok(Ok(report))) => {
            let counts = SeedCounts {
                tallies: report
                    .tallies()
                    .into_iter()
                    .map(|(n, v)| (n.to_string(), v))
                    .collect(),
                marks: coverage::counts()
                    .into_iter()
                    .map(|(m, n)| (m.name().to_string(), n))
                    .collect(),
                vacuous: report.vacuous.clone(),
            };
            Outcome::Passed(report.to_string(), counts)
        }
        Ok(Ok(Err(failure))) => Outcome::Failed(failure.to_string()),
        Ok(Err(payload)) => {
            Outcome::Failed(format!("seed {seed} PANICKED: {}", panic_message(payload)))
        }
        Err(e) => Outcome::Failed(format!("seed {seed}: cannot start a thread: {e}")),
    }
}

/// The body of the child test: runs the seed named by [`CHILD_ENV`], prints
/// the result line and panics on failure. Does nothing without the
/// variable, so the child test passes trivially in a normal test run.
pub fn child_main() {
    let Some(seed) = env_u64(&[CHILD_ENV]) else {
        return;
    };
    match run_in_process(seed) {
        Outcome::Passed(line, counts) => {
            println!("{PASS_PREFIX}{line}");
            println!("{TALLY_PREFIX}{}", encode_counts(&counts.tallies));
            println!("{MARKS_PREFIX}{}", encode_counts(&counts.marks));
            println!("{VACUOUS_PREFIX}{}", encode_list(&counts.vacuous));
        }
        Outcome::Failed(why) => panic!("{why}"),
    }
}

fn seed_deadline() -> Duration {
    env_u64(&["KAAS_SIM_SEED_TIMEOUT_SECS"]).map_or(SEED_DEADLINE, Duration::from_secs)
}

/// Waits for `child`, reading its output as it comes (a full pipe would
/// block it); kills it after `deadline` of real time.
fn wait_with_deadline(mut child: Child, deadline: Duration) -> Result<Output, String> {
    fn drain(pipe: Option<impl Read + Send + 'static>) -> std::thread::JoinHandle<Vec<u8>> {
        std::thread::spawn(move || {
            let mut buf = Vec::new();
            if let Some(mut p) = pipe {
                let _ = p.read_to_end(&mut buf);
            }
            buf
        })
    }
    let stdout = drain(child.stdout.take());
    let stderr = drain(child.stderr.take());
    let started = Instant::now();
    let status = loop {
        match child.try_wait() {
            Ok(Some(status)) => break status,
            Ok(None) if started.elapsed() < deadline => {
                std::thread::sleep(Duration::from_millis(20))
            }
            Ok(None) => {
                let _ = child.kill();
                let _ = child.wait();
                return Err(format!(
                    "HUNG: no result after {deadline:?} of real time (a task spinning at one simulated instant?)"
                ));
            }
            Err(e) => return Err(format!("cannot wait for the child process: {e}")),
        }
    };
    Ok(Output {
        status,
        stdout: stdout.join().unwrap_or_default(),
        stderr: stderr.join().unwrap_or_default(),
    })
}

/// Runs `seed` in a fresh process: this test binary, running only
/// `child_test`.
pub fn run_isolated(seed: u64, child_test: &str) -> Outcome {
    let exe = match std::env::current_exe() {
        Ok(exe) => exe,
        Err(e) => return Outcome::Failed(format!("seed {seed}: cannot find the test binary: {e}")),
    };
    let child = Command::new(exe)
        .args([child_test, "--exact", "--nocapture", "--test-threads=1"])
        .env(CHILD_ENV, seed.to_string())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn();
    let output = match child.map(|c| wait_with_deadline(c, seed_deadline())) {
        Ok(Ok(o)) => o,
        Ok(Err(why)) => return Outcome::Failed(format!("seed {seed}: {why}")),
        Err(e) => {
            return Outcome::Failed(format!("seed {seed}: cannot run the child process: {e}"))
        }
    };
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    // libtest prints "test seed_child ... " without a newline first.
    let after = |prefix: &str| {
        stdout
            .lines()
            .find_map(|l| l.find(prefix).map(|i| l[i + prefix.len()..].to_string()))
    };
    let pass = after(PASS_PREFIX);
    let counts = SeedCounts {
        tallies: after(TALLY_PREFIX).map_or_else(Vec::new, |s| decode_counts(&s)),
        marks: after(MARKS_PREFIX).map_or_else(Vec::new, |s| decode_counts(&s)),
        vacuous: after(VACUOUS_PREFIX).map_or_else(Vec::new, |s| decode_list(&s)),
    };
    match (output.status.success(), pass) {
        (true, Some(line)) => Outcome::Passed(line, counts),
        (true, None) => Outcome::Failed(format!(
            "seed {seed}: the child printed no result (is `{child_test}` the child test?)"
        )),
        (false, _) => {
            // The panic message is the failure report; libtest's noise
            // around it is dropped.
            let all = format!("{stderr}\n{stdout}");
            let report = all.find(&format!("seed {seed}")).map(|start| {
                let rest = &all[start..];
                let end = ["\nnote: run with `RUST_BACKTRACE", "\nstack backtrace"]
                    .iter()
                    .filter_map(|m| rest.find(m))
                    .min()
                    .unwrap_or(rest.len());
                rest[..end].to_string()
            });
            Outcome::Failed(report.unwrap_or_else(|| {
                format!("seed {seed}: child failed ({}):\n{all}", output.status)
            }))
        }
    }
}

/// What a batch run found: the failures, each with its replay command,
/// and the batch's summary.
pub struct BatchRun {
    pub failures: Vec<String>,
    pub summary: BatchSummary,
}

/// Runs every seed in its own process, `jobs` at a time, printing a
/// progress line every twentieth of the batch (every seed's line when
/// `selection.verbose`), each failure as it comes, and the summary at the
/// end.
pub fn run_all(selection: &Selection, child_test: &str) -> BatchRun {
    let queue = std::sync::Mutex::new(selection.seeds.iter().copied());
    let failures = std::sync::Mutex::new(Vec::new());
    let summary = std::sync::Mutex::new(BatchSummary::default());
    // Multi-broker seeds that passed, and those of them in which no
    // partition moved (the vacuity gate of `cluster_history`).
    let multi = std::sync::atomic::AtomicU64::new(0);
    let unmoved = std::sync::Mutex::new(Vec::new());
    let tally = std::sync::Mutex::new(ClusterTally::default());
    let total = selection.seeds.len();
    let progress_every = (total / 20).max(1);
    let started = Instant::now();
    let stopped = std::sync::atomic::AtomicBool::new(false);
    std::thread::scope(|scope| {
        for _ in 0..selection.jobs.min(total) {
            scope.spawn(|| loop {
                if stopped.load(std::sync::atomic::Ordering::Relaxed) {
                    break;
                }
                let next = queue.lock().unwrap_or_else(|p| p.into_inner()).next();
                let Some(seed) = next else { break };
                let t = Instant::now();
                let failure = match run_isolated(seed, child_test) {
                    Outcome::Passed(line, counts) => {
                        if selection.verbose {
                            // The seed's counts and the marks it hit, so a
                            // batch's log says which seeds reach a rare path
                            // (what sizing the CI batch needs).
                            let hit: Vec<(String, u64)> =
                                counts.marks.iter().filter(|(_, n)| *n > 0).cloned().collect();
                            println!(
                                "{line} | {:.1}s real\n  seed {seed} counts: {}\n  seed {seed} marks: {}",
                                t.elapsed().as_secs_f64(),
                                encode_counts(&counts.tallies),
                                encode_counts(&hit)
                            );
                        }
                        if line.contains("| cluster: ") {
                            multi.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                            if line.contains("NO MOVE") {
                                unmoved.lock().unwrap_or_else(|p| p.into_inner()).push(seed);
                            }
                            tally
                                .lock()
                                .unwrap_or_else(|p| p.into_inner())
                                .add(seed, &line);
                        }
                        let failure = if selection.check_determinism {
                            check_determinism(seed, child_test, &line, &counts).err()
                        } else {
                            None
                        };
                        if failure.is_none() {
                            summary
                                .lock()
                                .unwrap_or_else(|p| p.into_inner())
                                .passed(seed, &counts);
                        }
                        failure
                    }
                    Outcome::Failed(why) => Some(why),
                };
                let mut summary = summary.lock().unwrap_or_else(|p| p.into_inner());
                if let Some(failure) = failure {
                    if selection.stop_at_failure {
                        stopped.store(true, std::sync::atomic::Ordering::Relaxed);
                    }
                    summary.failed();
                    let message = format!("{failure}\nreplay: {}", replay_command(seed));
                    eprintln!("{message}");
                    failures
                        .lock()
                        .unwrap_or_else(|p| p.into_inner())
                        .push(message);
                }
                let done = summary.seeds() as usize;
                if !selection.verbose && (done.is_multiple_of(progress_every) || done == total) {
                    let failed = failures.lock().unwrap_or_else(|p| p.into_inner()).len();
                    println!(
                        "sim: {done}/{total} seeds, {failed} failed, {:.0} s",
                        started.elapsed().as_secs_f64()
                    );
                }
            });
        }
    });
    let failures = failures.into_inner().unwrap_or_else(|p| p.into_inner());
    let summary = summary.into_inner().unwrap_or_else(|p| p.into_inner());
    let mut unmoved = unmoved.into_inner().unwrap_or_else(|p| p.into_inner());
    unmoved.sort_unstable();
    println!(
        "{} seeds in {:.1}s ({} jobs), {} failed; {} multi-broker seeds passed, {} of them saw no partition move{}",
        summary.seeds(),
        started.elapsed().as_secs_f64(),
        selection.jobs,
        failures.len(),
        multi.into_inner(),
        unmoved.len(),
        if unmoved.is_empty() {
            String::new()
        } else {
            format!(" (seeds {unmoved:?})")
        }
    );
    let tally = tally.into_inner().unwrap_or_else(|p| p.into_inner());
    if tally != ClusterTally::default() {
        println!("{tally}");
    }
    print!("{}", summary.table(started.elapsed(), selection.jobs));
    BatchRun { failures, summary }
}

/// What the passing multi-broker seeds of a run did, from their report
/// lines: which ran the coordinator workloads, whether those saw a
/// coordinator move, which had volume partitions.
#[derive(Debug, Default, PartialEq, Eq)]
struct ClusterTally {
    group: u64,
    txn: u64,
    eos: u64,
    coordinated: u64,
    /// Seeds with a coordinator workload that saw no coordinator move.
    unmoved_coordinators: Vec<u64>,
    volume_partitions: u64,
}

impl ClusterTally {
    fn add(&mut self, seed: u64, line: &str) {
        let (group, txn, eos) = (
            line.contains("| group: "),
            line.contains("| txn: "),
            line.contains("| eos: "),
        );
        self.group += u64::from(group);
        self.txn += u64::from(txn);
        self.eos += u64::from(eos);
        if group || txn || eos {
            self.coordinated += 1;
            if line.contains("NO COORDINATOR MOVE") {
                self.unmoved_coordinators.push(seed);
            }
        }
        self.volume_partitions += u64::from(!line.contains(" 0 volume partitions"));
    }
}

impl std::fmt::Display for ClusterTally {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let mut unmoved = self.unmoved_coordinators.clone();
        unmoved.sort_unstable();
        write!(
            f,
            "multi-broker seeds: {} with a group, {} with transactional producers, {} with the EOS loop; {} of the {} with one of them saw no coordinator move{}; {} had volume partitions",
            self.group,
            self.txn,
            self.eos,
            unmoved.len(),
            self.coordinated,
            if unmoved.is_empty() {
                String::new()
            } else {
                format!(" (seeds {unmoved:?})")
            },
            self.volume_partitions,
        )
    }
}

/// Runs `seed` again in another fresh process and compares its report
/// (every counter, the simulated duration to the nanosecond's display, and a
/// fingerprint of the history and final logs) with `first`.
pub fn check_determinism(
    seed: u64,
    child_test: &str,
    first: &str,
    first_counts: &SeedCounts,
) -> Result<(), String> {
    match run_isolated(seed, child_test) {
        Outcome::Passed(second, counts) if second == first && counts == *first_counts => Ok(()),
        Outcome::Passed(second, counts) if second == first => Err(format!("seed {seed} is not deterministic: two runs differ in their counters or coverage marks\n  first:  {first_counts:?}\n  second: {counts:?}")),
        Outcome::Passed(second, _) => Err(format!("seed {seed} is not deterministic: two runs differ\n  first:  {first}\n  second: {second}")),
        Outcome::Failed(why) => Err(format!("seed {seed} is not deterministic: passed once, then failed:\n{why}")),
    }
}
