//! `kaas-diff`: the differential suite. Every scenario runs against Apache
//! Kafka and against kaas at once; what a client could observe is written
//! down on each side and compared. A difference is a failure unless it is
//! on the documented list (src/differences.rs, docs/oracle.md).
//!
//! scripts/diff starts both brokers and runs this; by hand:
//!
//! ```text
//! kaas-diff --kafka 127.0.0.1:9093 --kaas 127.0.0.1:9092            every scenario
//! kaas-diff ... --only fetch                                          names containing "fetch"
//! kaas-diff ... --generated --seed 7                                  one generated sequence
//! kaas-diff ... --generated --seeds 20 --from 100                     seeds 100..119
//! kaas-diff --list | --differences                                    what there is
//! ```

/// Sends `$body` at `$version` and takes the answer apart as
/// `ResponseBody::$variant`; an answer of another API is written down at
/// `$step` and ends the scenario. (A closed connection already ends it in
/// `Session::call`.)
macro_rules! call_as {
    ($s:expr, $variant:ident, $version:expr, $body:expr, $step:expr) => {
        match $s.call($version, $body).await? {
            kaas_core::protocol::ResponseBody::$variant(r) => r,
            _ => return Err($s.wrong_answer($step)),
        }
    };
}

mod differences;
mod generated;
mod observe;
mod ops;
mod scenarios;
mod session;
mod transcript;

use clap::Parser;
use rand::Rng;
use scenarios::Scenario;
use serde_json::Value;
use session::{overlap, Session, Versions};
use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Instant;
use transcript::{compare, Mismatch, Transcript, Verdict};

#[derive(Parser, Debug)]
#[command(
    name = "kaas-diff",
    about = "Run scenarios against Apache Kafka and kaas and compare"
)]
struct Args {
    /// Apache Kafka's bootstrap address.
    #[arg(long)]
    kafka: Option<SocketAddr>,
    /// kaas's bootstrap address.
    #[arg(long)]
    kaas: Option<SocketAddr>,
    /// Run only scenarios whose name contains one of these.
    #[arg(long)]
    only: Vec<String>,
    /// Run generated sequences instead of the written scenarios.
    #[arg(long)]
    generated: bool,
    /// The one seed to run (with --generated).
    #[arg(long)]
    seed: Option<u64>,
    /// How many seeds to run (with --generated), starting at --from.
    #[arg(long, default_value_t = 10)]
    seeds: u64,
    #[arg(long, default_value_t = 1)]
    from: u64,
    /// Scenarios run at once (each against both brokers).
    #[arg(long, default_value_t = 4)]
    jobs: usize,
    /// Operations per generated sequence.
    #[arg(long, default_value_t = 40)]
    steps: usize,
    /// Print both transcripts of every scenario, not only of failures.
    #[arg(long)]
    verbose: bool,
    /// List the scenarios and exit.
    #[arg(long)]
    list: bool,
    /// Print the documented differences as a markdown table and exit.
    #[arg(long)]
    differences: bool,
}

#[tokio::main(flavor = "current_thread")]
async fn main() -> ExitCode {
    let args = Args::parse();
    if args.list {
        for s in scenarios::all() {
            println!("{:<40} {}", s.name, s.about);
        }
        return ExitCode::SUCCESS;
    }
    if args.differences {
        print!("{}", differences::markdown());
        return ExitCode::SUCCESS;
    }
    let (Some(kafka), Some(kaas)) = (args.kafka, args.kaas) else {
        eprintln!("kaas-diff: --kafka and --kaas are both needed (see --help)");
        return ExitCode::from(2);
    };
    let versions = match (
        session::api_versions(kafka).await,
        session::api_versions(kaas).await,
    ) {
        (Ok(a), Ok(b)) => overlap(&a, &b),
        (Err(e), _) => {
            eprintln!("kaas-diff: Kafka at {kafka} does not answer ApiVersions: {e}");
            return ExitCode::from(2);
        }
        (_, Err(e)) => {
            eprintln!("kaas-diff: kaas at {kaas} does not answer ApiVersions: {e}");
            return ExitCode::from(2);
        }
    };
    let runner = Runner {
        kafka,
        kaas,
        versions,
        run_id: format!("{:06x}", rand::thread_rng().gen::<u32>() & 0xff_ffff),
        verbose: args.verbose,
    };
    let started = Instant::now();
    let mut tally = Tally::default();
    let jobs: Vec<Job> = if args.generated {
        let seeds: Vec<u64> = match args.seed {
            Some(s) => vec![s],
            None => (args.from..args.from + args.seeds).collect(),
        };
        seeds
            .into_iter()
            .map(|seed| Job {
                name: format!("generated/{seed}"),
                replay: format!(
                    "scripts/diff --generated --seed {seed} --steps {}",
                    args.steps
                ),
                kind: JobKind::Generated {
                    seed,
                    steps: args.steps,
                },
            })
            .collect()
    } else {
        let chosen: Vec<Job> = scenarios::all()
            .into_iter()
            .filter(|s| {
                args.only.is_empty() || args.only.iter().any(|o| s.name.contains(o.as_str()))
            })
            .map(|s| Job {
                name: s.name.to_owned(),
                replay: format!("scripts/diff --only {}", s.name),
                kind: JobKind::Written(s),
            })
            .collect();
        if chosen.is_empty() {
            eprintln!("kaas-diff: no scenario matches {:?}", args.only);
            return ExitCode::from(2);
        }
        chosen
    };
    let runner = Arc::new(runner);
    let mut pending = jobs.into_iter().enumerate().peekable();
    let mut running = tokio::task::JoinSet::new();
    // Whether the job running now must run alone (scenarios::ALONE).
    let mut alone_running = false;
    let mut done: BTreeMap<usize, (Job, Transcript, Transcript)> = BTreeMap::new();
    let mut next_to_report = 0;
    loop {
        while running.len() < args.jobs.max(1) && !alone_running {
            let Some((_, next)) = pending.peek() else {
                break;
            };
            let alone =
                matches!(&next.kind, JobKind::Written(sc) if scenarios::ALONE.contains(&sc.name));
            if alone && !running.is_empty() {
                break;
            }
            let Some((i, job)) = pending.next() else {
                break;
            };
            alone_running = alone;
            let runner = Arc::clone(&runner);
            running.spawn(async move {
                let (k, s) = match &job.kind {
                    JobKind::Written(sc) => runner.run_both(&job.name, sc.run).await,
                    JobKind::Generated { seed, steps } => {
                        let (seed, steps) = (*seed, *steps);
                        runner
                            .run_both(&job.name, move |sess| {
                                Box::pin(generated::run(sess, seed, steps))
                            })
                            .await
                    }
                };
                (i, job, k, s)
            });
        }
        let Some(joined) = running.join_next().await else {
            break;
        };
        alone_running = false;
        match joined {
            Ok((i, job, k, s)) => {
                done.insert(i, (job, k, s));
            }
            Err(e) => {
                eprintln!("kaas-diff: a scenario task failed: {e}");
                return ExitCode::from(2);
            }
        }
        // Report in the order the scenarios are listed, as soon as each
        // one's predecessors are reported.
        while let Some((job, k, s)) = done.remove(&next_to_report) {
            let verdict = compare(&job.name, &k, &s);
            runner.report(&job.name, &k, &s, &verdict, &job.replay);
            tally.add(&verdict);
            next_to_report += 1;
        }
    }
    println!(
        "\nkaas-diff: {} scenarios, {} passed ({} with documented differences), {} failed, in {:.1} s",
        tally.total,
        tally.total - tally.failed,
        tally.with_documented,
        tally.failed,
        started.elapsed().as_secs_f64()
    );
    if tally.failed == 0 {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    }
}

/// One scenario to run against both brokers.
struct Job {
    name: String,
    /// The command that runs it again alone.
    replay: String,
    kind: JobKind,
}

enum JobKind {
    Written(Scenario),
    Generated { seed: u64, steps: usize },
}

#[derive(Default)]
struct Tally {
    total: usize,
    failed: usize,
    with_documented: usize,
}

impl Tally {
    fn add(&mut self, v: &Verdict) {
        self.total += 1;
        if !v.passed() {
            self.failed += 1;
        } else if !v.documented.is_empty() {
            self.with_documented += 1;
        }
    }
}

struct Runner {
    kafka: SocketAddr,
    kaas: SocketAddr,
    versions: Versions,
    run_id: String,
    verbose: bool,
}

impl Runner {
    /// Runs one scenario against both brokers at once and returns
    /// (Kafka's transcript, kaas's transcript).
    async fn run_both<F>(&self, name: &str, run: F) -> (Transcript, Transcript)
    where
        F: for<'a> Fn(&'a mut Session) -> scenarios::BoxedRun<'a>,
    {
        // Names are unique per run and scenario; a broker that saw earlier
        // runs (a Kafka started by hand) is not confused by them.
        let prefix = format!("kd{}-{}", self.run_id, name.replace('/', "."));
        let t0 = session::wall_clock_ms() / 1000 * 1000;
        let mut k = Session::new(self.kafka, prefix.clone(), self.versions.clone(), t0);
        let mut s = Session::new(self.kaas, prefix, self.versions.clone(), t0);
        let (rk, rs) = tokio::join!(run(&mut k), run(&mut s));
        for (sess, result) in [(&mut k, rk), (&mut s, rs)] {
            if let Err(stop) = result {
                sess.observe("stopped", Value::String(stop.0));
            }
        }
        (k.transcript, s.transcript)
    }

    fn report(&self, name: &str, k: &Transcript, s: &Transcript, v: &Verdict, replay: &str) {
        if v.passed() {
            let note = if v.documented.is_empty() {
                String::new()
            } else {
                format!(", {} documented difference(s)", v.documented.len())
            };
            println!("ok    {name} ({} steps{note})", k.len().max(s.len()));
        } else {
            println!("FAIL  {name}    replay: {replay}");
            for m in &v.unexpected {
                print_mismatch(m);
            }
            if let Some(why) = &v.unrunnable {
                println!("      could not run: {why}");
            }
            for d in &v.stale {
                println!(
                    "      documented difference at step {:?} no longer occurs: {}",
                    d.step, d.why
                );
            }
        }
        if self.verbose || !v.passed() {
            print_side_by_side(k, s);
        }
    }
}

fn print_mismatch(m: &Mismatch) {
    let show = |v: &Option<Value>| {
        v.as_ref()
            .map_or("(nothing: the run had ended)".to_owned(), Value::to_string)
    };
    println!("      step {} {:?}", m.index, m.step);
    println!("        kafka: {}", show(&m.kafka));
    println!("        kaas:  {}", show(&m.kaas));
}

fn print_side_by_side(k: &Transcript, s: &Transcript) {
    for i in 0..k.len().max(s.len()) {
        let a = k.entries.get(i);
        let b = s.entries.get(i);
        let mark = if a == b { ' ' } else { '!' };
        let step = a.or(b).map_or("", |e| e.step.as_str());
        println!("      {mark} {i:>3} {step}");
        if a == b {
            if let Some(e) = a {
                println!("             both:  {}", e.value);
            }
        } else {
            println!(
                "             kafka: {}",
                a.map_or("-".into(), |e| e.value.to_string())
            );
            println!(
                "             kaas:  {}",
                b.map_or("-".into(), |e| e.value.to_string())
            );
        }
    }
}
