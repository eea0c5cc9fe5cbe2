//! `uswap` read like a tool: `uswap run --help` leads with an example and the few flags a
//! user needs, the knobs under a heading of their own in one line each, `-h` shorter
//! still; the manual pages and shell completions come from the same definitions.
//! Nothing here needs userfaultfd.

use std::process::{Command, Output};

mod common;
use common::TempDir;

fn uswap(args: &[&str]) -> Output {
    let out = Command::new(env!("CARGO_BIN_EXE_uswap")).args(args).output().unwrap();
    assert!(out.status.success(), "uswap {args:?}: {}", String::from_utf8_lossy(&out.stderr));
    out
}

fn stdout(out: &Output) -> String {
    String::from_utf8_lossy(&out.stdout).to_string()
}

/// The flags of a section of the help, by their long names.
fn option_names(section: &str) -> Vec<String> {
    section
        .lines()
        .filter(|l| l.trim_start().starts_with('-'))
        .filter_map(|l| l.trim_start().split("--").nth(1))
        .map(|rest| rest.split([' ', '=', '[', '<']).next().unwrap_or_default().to_string())
        .collect()
}

#[test]
fn run_help_leads_with_an_example_and_the_flags_a_user_needs() {
    let help = stdout(&uswap(&["run", "--help"]));
    let first: Vec<&str> = help.lines().take(4).collect();
    assert!(first[0].starts_with("Run a program"), "{help}");
    assert_eq!(first[2], "Example: uswap run --budget 256M -- python3 train.py", "{help}");
    let options = help.split("\nOptions:\n").nth(1).unwrap_or_else(|| panic!("{help}"));
    let (main, rest) =
        options.split_once("\n\nOutput files:\n").unwrap_or_else(|| panic!("{help}"));
    assert_eq!(
        option_names(main),
        ["budget", "stats-every", "swap-file", "swap-size", "verbose", "config", "help", "version"],
        "{help}"
    );
    let knobs_heading = "\n\nKnobs (docs/RUN.md explains each):\n";
    let (_, knobs) = rest.split_once(knobs_heading).unwrap_or_else(|| panic!("{help}"));
    for knob in ["zswap", "delivery", "cpus", "idle-poll", "far", "folio-order"] {
        assert!(option_names(knobs).iter().any(|n| n == knob), "--{knob} under Knobs: {help}");
    }
    assert!(help.len() < 6 * 1024, "{} bytes of --help", help.len());
    assert!(!help.contains(" us ") && !help.contains("2-vCPU"), "no benchmark figures: {help}");
}

/// `-h`: one line a flag, each description on the flag's own line, the example kept.
#[test]
fn short_help_is_one_line_a_flag() {
    let short = stdout(&uswap(&["run", "-h"]));
    let long = stdout(&uswap(&["run", "--help"]));
    assert!(short.len() < long.len(), "-h {} bytes, --help {}", short.len(), long.len());
    assert!(short.contains("Example: uswap run --budget 256M -- python3 train.py"), "{short}");
    assert!(short.len() < 4096, "{} bytes of -h", short.len());
    for line in short.lines().filter(|l| l.trim_start().starts_with('-')) {
        assert!(line.contains("  "), "a flag without its description on its line: {line:?}");
    }
    for line in short.lines() {
        assert!(line.chars().count() <= 100, "a line past 100 columns: {line:?}");
    }
}

#[test]
fn man_pages_come_from_the_flags() {
    let page = stdout(&uswap(&["man"]));
    assert!(page.starts_with(".ie \\n(.g .ds Aq") || page.contains(".TH uswap"), "{page}");
    let dir = TempDir::new("man");
    uswap(&["man", "--dir", dir.path()]);
    let names: Vec<String> = dir.sizes().into_iter().map(|(name, _)| name).collect();
    for name in ["uswap.1", "uswap-run.1", "uswap-stat.1", "uswap-check.1"] {
        assert!(names.iter().any(|n| n == name), "{name} missing: {names:?}");
    }
    let run = std::fs::read_to_string(dir.0.join("uswap-run.1")).unwrap();
    for text in ["budget", "stats\\-every", "idle\\-poll", "Example: uswap run", "EXTRA"] {
        assert!(run.contains(text), "uswap-run.1 lacks {text}");
    }
    assert!(!names.iter().any(|n| n == "uswap-help.1"), "no page for clap's help: {names:?}");
}

#[test]
fn completions_for_each_shell_name_the_subcommands_and_flags() {
    for shell in ["bash", "zsh", "fish"] {
        let script = stdout(&uswap(&["completions", shell]));
        for word in ["stat", "run", "--budget", "--watch"] {
            assert!(script.contains(word), "{shell} completions lack {word}");
        }
    }
    let out = Command::new(env!("CARGO_BIN_EXE_uswap")).args(["completions", "tcsh"]).output();
    assert_eq!(out.unwrap().status.code(), Some(2), "an unknown shell is a usage error");
}
