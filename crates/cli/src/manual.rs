//! `uswap man` and `uswap completions SHELL`: the manual pages and the shell completions,
//! made from the same clap definitions as `--help` (clap_mangen, clap_complete), so they
//! cannot drift from the flags. The Debian package (contrib/deb/build-deb) installs what
//! these print.

use anyhow::{Context, Result};
use std::io::Write as _;
use std::path::{Path, PathBuf};

/// Flags of `uswap man`.
#[derive(Debug, clap::Args)]
pub struct ManArgs {
    /// Write uswap.1 and a page per subcommand (uswap-run.1, ...) into DIR, instead of
    /// printing uswap.1
    #[arg(long, value_name = "DIR")]
    dir: Option<PathBuf>,
}

/// Flags of `uswap completions`.
#[derive(Debug, clap::Args)]
pub struct CompletionsArgs {
    /// The shell to complete for
    #[arg(value_enum)]
    shell: clap_complete::Shell,
}

/// Prints the top page, or writes every page into `--dir`.
///
/// # Errors
/// A page cannot be written.
pub fn man(args: ManArgs, mut command: clap::Command) -> Result<()> {
    command.build();
    let Some(dir) = args.dir else {
        let mut page = Vec::new();
        clap_mangen::Man::new(command).render(&mut page).context("rendering uswap.1")?;
        return write_stdout(&page);
    };
    std::fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
    write_page(&command, &dir)?;
    let pages = command.get_subcommands().filter(|s| !s.is_hide_set() && s.get_name() != "help");
    for sub in pages {
        write_page(sub, &dir)?;
    }
    Ok(())
}

/// Writes `command`'s page as `<its name>.1` in `dir`. The example its help leads with
/// (`before_help`, which clap_mangen leaves out) goes into the page's description.
fn write_page(command: &clap::Command, dir: &Path) -> Result<()> {
    let name = command.get_display_name().unwrap_or_else(|| command.get_name()).to_string();
    let path = dir.join(format!("{name}.1"));
    let mut shown = command.clone();
    if let Some(example) = command.get_before_help() {
        let about = command.get_long_about().or(command.get_about());
        let about = about.map(ToString::to_string).unwrap_or_default();
        shown = shown.long_about(format!("{about}\n\n{example}"));
    }
    let mut page = Vec::new();
    clap_mangen::Man::new(shown)
        .title(name.to_uppercase())
        .render(&mut page)
        .with_context(|| format!("rendering {name}.1"))?;
    std::fs::write(&path, page).with_context(|| format!("writing {}", path.display()))
}

/// Prints the completion script for `args.shell`.
///
/// # Errors
/// Standard output cannot be written.
pub fn completions(args: CompletionsArgs, mut command: clap::Command) -> Result<()> {
    let mut script = Vec::new();
    clap_complete::generate(args.shell, &mut command, "uswap", &mut script);
    write_stdout(&script)
}

fn write_stdout(bytes: &[u8]) -> Result<()> {
    let mut out = std::io::stdout().lock();
    out.write_all(bytes).and_then(|()| out.flush()).context("writing to standard output")
}
