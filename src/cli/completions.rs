//! `fleet completions bash|zsh|fish`: the shell completion script for fleet, on stdout.

use std::io::Write;

use super::Error;

#[derive(Debug, clap::Args)]
pub struct Args {
    /// The shell to complete for.
    #[arg(value_enum, value_name = "SHELL")]
    pub shell: clap_complete::Shell,
}

impl Args {
    pub fn run(self, out: &mut (dyn Write + Send)) -> Result<(), Error> {
        use clap::CommandFactory;
        let full = super::Cli::command();
        // The hidden verbs (the operation wrapper) are fleet's own business: not every shell's
        // generator leaves them out, so they are taken out here.
        let mut cmd = clap::Command::new("fleet")
            .version(super::VERSION)
            .args(full.get_arguments().cloned())
            .subcommands(full.get_subcommands().filter(|c| !c.is_hide_set()).cloned());
        let mut script = Vec::new();
        clap_complete::generate(self.shell, &mut cmd, "fleet", &mut script);
        out.write_all(&script)?;
        Ok(())
    }
}
