//! `fleet acl --config FILE --passwords DIR`: the ACL file of fleet's Redis users (SPEC §2.11):
//! `fleet-controller`, `fleet-viewer` and one user per slot of the configuration, named after it.
//!
//! Each user's password is read from `DIR/<user>` and written only as its SHA-256, so the output
//! can be shown, reviewed and kept. Needs no Redis: the file is given to `redis-server --aclfile`
//! (or loaded with `ACL LOAD`). A configuration that cannot be used, a slot named like one of
//! fleet's own users, or a password file that is missing, unreadable, empty or of more than one
//! line is exit 2, every password file's problem said at once with what to put there.

use std::io::Write;
use std::path::{Path, PathBuf};

use crate::config;
use crate::store::acl::User;

use super::{Ctx, Error};

#[derive(Debug, clap::Args)]
pub struct Args {
    /// The configuration file: one Redis user is made for each slot it names.
    #[arg(long, env = "FLEET_CONFIG")]
    pub config: PathBuf,
    /// A directory holding one file per user, named after it (fleet-controller, fleet-viewer and
    /// each slot), with that user's password on one line.
    #[arg(long, env = "FLEET_ACL_PASSWORDS")]
    pub passwords: PathBuf,
}

impl Args {
    pub async fn run(self, ctx: &Ctx, out: &mut (dyn Write + Send)) -> Result<(), Error> {
        let config = config::load(&self.config).map_err(|e| Error::Usage(e.into()))?;
        let users =
            User::all(&ctx.keys, config.slots.keys()).map_err(|e| Error::Usage(e.into()))?;
        let mut lines = Vec::with_capacity(users.len());
        let mut problems = Vec::new();
        for user in &users {
            match password(&self.passwords, &user.name(&ctx.keys)) {
                Ok(password) => lines.push(user.line(&ctx.keys, &password)),
                Err(problem) => problems.push(problem),
            }
        }
        if !problems.is_empty() {
            return Err(Error::usage(format!(
                "{}: put each user's password in a file of this directory named after the user, \
                 on one line (a trailing newline is dropped), readable by the deployment only:\n{}",
                self.passwords.display(),
                problems.join("\n")
            )));
        }
        for line in lines {
            writeln!(out, "{line}")?;
        }
        // Said apart from the file (an ACL file has no comments): the file leaves Redis's own
        // default user as the server has it, and a default user with no password undoes it all.
        eprintln!(
            "fleet acl: {} users; the file does not define Redis's default user: turn it off \
             (`user default off`) or give it a password, or any client can still do everything",
            users.len()
        );
        // A group's keys are `{P:<group>}:…`, so the controller of a fleet whose prefix is the
        // part of this one's before a ':' reaches every key of this one (SPEC §7 S9).
        if let Some((parent, _)) = ctx.keys.prefix().rsplit_once(':') {
            eprintln!(
                "fleet acl: warning: the prefix {} holds ':', so the users of a fleet with the \
                 prefix {parent} (or any part before a ':') reach its keys; choose a prefix \
                 without ':' to keep two fleets on one Redis apart",
                ctx.keys.prefix()
            );
        }
        Ok(())
    }
}

/// The password in `dir/<user>`: the file's text less one trailing newline. A file that cannot
/// be read, is empty, or holds more than one line is a problem naming the file and the fix.
fn password(dir: &Path, user: &str) -> Result<String, String> {
    let named = format!("the password of the Redis user {user}");
    let short = format!("the password of {user}");
    let whose = super::args::Whose {
        named: &named,
        short: &short,
        reader: "fleet acl",
    };
    super::args::one_line_secret(&dir.join(user), &whose)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_password_is_the_files_one_line_without_its_newline() {
        let dir = tempfile::tempdir().unwrap();
        for (file, text) in [
            ("a", "pw\n"),
            ("b", "pw"),
            ("c", "pw\r\n"),
            ("d", " p w \n"),
        ] {
            std::fs::write(dir.path().join(file), text).unwrap();
        }
        assert_eq!(password(dir.path(), "a").unwrap(), "pw");
        assert_eq!(password(dir.path(), "b").unwrap(), "pw");
        assert_eq!(password(dir.path(), "c").unwrap(), "pw");
        assert_eq!(password(dir.path(), "d").unwrap(), " p w ");
    }

    #[test]
    fn a_missing_empty_or_many_line_password_file_says_what_to_put_there() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("empty"), "\n").unwrap();
        std::fs::write(dir.path().join("two"), "a\nb\n").unwrap();
        std::fs::write(dir.path().join("binary"), [0xff, 0xfe]).unwrap();
        std::fs::create_dir(dir.path().join("folder")).unwrap();
        for (user, says) in [
            (
                "none",
                "missing: write the password of the Redis user none there",
            ),
            (
                "empty",
                "empty: write the password of the Redis user empty there",
            ),
            ("two", "more than one line"),
            ("binary", "not UTF-8"),
            ("folder", "cannot be read"),
        ] {
            let err = password(dir.path(), user).unwrap_err();
            assert!(
                err.starts_with(&dir.path().join(user).display().to_string()),
                "{err}"
            );
            assert!(err.contains(says), "{user}: {err}");
        }
    }
}
