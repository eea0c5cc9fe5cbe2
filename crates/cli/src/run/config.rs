//! `uswap run`'s config file: the settings its flags take, in TOML, for the runs a user
//! starts often (a laptop's budget, a CI runner's pool).
//!
//! ```toml
//! [run]
//! budget = "auto:2,max=4G"   # any long flag of `uswap run`, without its dashes
//! zswap = "zstd"
//! pool-percent = 25
//! verbose = true             # a flag without a value: true or false
//! ```
//!
//! The file is `--config FILE`, else `$XDG_CONFIG_HOME/uswap/config.toml` (`~/.config`
//! when the variable is unset) where it exists. Its settings go before the command line's
//! flags, and a flag given on both wins on the command line (the parser lets a later flag
//! override an earlier one), so one parser checks both the same way. The flags that name
//! one run's files (`--swap-file`, `--stats-file`, `--record`, `--plot`, `--force`) and
//! `--config` itself have no place in a file.

use super::RunArgs;
use anyhow::{anyhow, bail, Context, Result};
use clap::{ArgAction, Args, FromArgMatches};
use std::path::{Path, PathBuf};

/// The table the settings are under.
const TABLE: &str = "run";
/// Flags a file cannot set (module essay).
const PER_RUN: [&str; 6] = ["swap-file", "stats-file", "record", "plot", "force", "config"];

/// `uswap run`'s flags as a parser, a later flag overriding an earlier one.
fn parser() -> clap::Command {
    RunArgs::augment_args(clap::Command::new("uswap run").no_binary_name(true))
        .args_override_self(true)
}

/// The file `args` says to read: `--config`, else the user's default where it exists.
fn file_of(args: &RunArgs) -> Option<PathBuf> {
    if let Some(path) = &args.config {
        return Some(path.clone());
    }
    let home = std::env::var_os("XDG_CONFIG_HOME")
        .filter(|dir| !dir.is_empty())
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|home| Path::new(&home).join(".config")))?;
    Some(home.join("uswap/config.toml")).filter(|path| path.is_file())
}

/// `args` with the config file's settings under them (module essay); `args` as they are
/// without a file. `given` is the command line after `run`, which `args` were parsed from.
///
/// # Errors
/// One line naming the file and what is wrong in it: unreadable, not TOML, a setting that
/// is not a flag of `uswap run` or has no place in a file, or a value the flag refuses.
pub fn with_file(args: RunArgs, given: &[String]) -> Result<RunArgs> {
    let Some(path) = file_of(&args) else { return Ok(args) };
    let text =
        std::fs::read_to_string(&path).with_context(|| format!("--config {}", path.display()))?;
    let from_file = flags_of(&text).map_err(|e| anyhow!("{}: {e}", path.display()))?;
    // The file alone first, so that a bad value is blamed on the file.
    let mut alone = from_file.clone();
    alone.extend(["--".to_string(), "true".to_string()]);
    parser()
        .try_get_matches_from(&alone)
        .map_err(|e| anyhow!("{}: {}", path.display(), one_line(&e)))?;
    let all: Vec<String> = from_file.into_iter().chain(given.iter().cloned()).collect();
    let matches = parser().try_get_matches_from(&all).map_err(|e| anyhow!("{}", one_line(&e)))?;
    let mut merged = RunArgs::from_arg_matches(&matches).map_err(|e| anyhow!("{e}"))?;
    merged.config = Some(path);
    Ok(merged)
}

/// A clap error's message in one line: its first line and the possible values, without
/// the usage and the pointer to `--help`.
pub fn one_line(error: &clap::Error) -> String {
    let text = error.render().to_string();
    let lines = text.lines().map(str::trim).filter(|line| {
        !line.is_empty() && !line.starts_with("Usage:") && !line.starts_with("For more")
    });
    lines.collect::<Vec<_>>().join(" ").trim_start_matches("error: ").to_string()
}

/// The flags the file's text sets (a key appears once: their order does not matter).
fn flags_of(text: &str) -> Result<Vec<String>> {
    let table: toml::Table =
        text.parse().map_err(|e: toml::de::Error| anyhow!("not TOML: {}", e.message()))?;
    let mut flags = Vec::new();
    for (key, value) in &table {
        let toml::Value::Table(settings) = value else {
            bail!("{key}: settings go under [{TABLE}]");
        };
        if key != TABLE {
            bail!("[{key}]: the only table is [{TABLE}]");
        }
        for (name, value) in settings {
            flags.extend(flag_of(name, value)?);
        }
    }
    Ok(flags)
}

/// The command-line form of one setting.
fn flag_of(name: &str, value: &toml::Value) -> Result<Vec<String>> {
    let parser = parser();
    let arg = parser
        .get_arguments()
        .find(|arg| arg.get_long() == Some(name))
        .ok_or_else(|| anyhow!("{name}: not a flag of uswap run"))?;
    if PER_RUN.contains(&name) {
        bail!("{name}: names one run's files; give it on the command line");
    }
    let flag = format!("--{name}");
    let switch = matches!(arg.get_action(), ArgAction::SetTrue | ArgAction::Count);
    Ok(match value {
        toml::Value::Boolean(on) if switch => {
            if *on {
                vec![flag]
            } else {
                vec![]
            }
        }
        _ if switch => bail!("{name} = {value}: use true or false"),
        toml::Value::String(text) => vec![flag, text.clone()],
        toml::Value::Integer(n) => vec![flag, n.to_string()],
        toml::Value::Float(x) => vec![flag, x.to_string()],
        _ => bail!("{name} = {value}: use a string or a number"),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn flags(text: &str) -> Result<Vec<String>> {
        flags_of(text)
    }

    #[test]
    fn settings_become_flags() {
        let text = "[run]\nbudget = \"64M\"\npool-percent = 25\nverbose = true\n\
                    stats-every = 0.5\n";
        let want = ["--budget", "64M", "--pool-percent", "25", "--stats-every", "0.5", "--verbose"];
        assert_eq!(flags(text).unwrap(), want);
        assert!(flags("[run]\nverbose = false\n").unwrap().is_empty());
    }

    #[test]
    fn a_bad_file_is_refused_in_one_line() {
        let e = |text: &str| flags(text).unwrap_err().to_string();
        assert_eq!(e("[run]\nbudjet = \"1G\"\n"), "budjet: not a flag of uswap run");
        assert_eq!(
            e("[run]\nrecord = \"t\"\n"),
            "record: names one run's files; give it on \
                                                  the command line"
        );
        assert_eq!(e("budget = \"1G\"\n"), "budget: settings go under [run]");
        assert_eq!(e("[sim]\nx = 1\n"), "[sim]: the only table is [run]");
        assert_eq!(e("[run]\nverbose = \"yes\"\n"), "verbose = \"yes\": use true or false");
        assert!(e("[run\n").starts_with("not TOML"), "{}", e("[run\n"));
    }
}
