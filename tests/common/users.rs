//! Real unprivileged users for attack and sharing tests: a lab group whose members
//! share a cache, one of them hostile. Creating users needs root; elsewhere the
//! tests that need them skip with a message.

use std::path::Path;
use std::process::Command;

/// The group both users belong to, as a lab's project space.
pub const LAB_GROUP: &str = "ferrylab";

#[derive(Debug, Clone)]
pub struct User {
    pub name: &'static str,
    pub uid: u32,
    pub gid: u32,
}

impl User {
    /// `program` run as this user (with their groups), keeping the environment.
    pub fn command(&self, program: impl AsRef<std::ffi::OsStr>) -> Command {
        let mut command = Command::new("runuser");
        command.args(["-u", self.name, "--"]).arg(program);
        command
    }

    /// The test build of `ferry`, run as this user.
    pub fn ferry(&self) -> Command {
        self.command(env!("CARGO_BIN_EXE_ferry"))
    }

    /// Makes `path` (a file or directory) this user's.
    pub fn chown(&self, path: &Path) {
        rustix::fs::chown(path, Some(rustix::fs::Uid::from_raw(self.uid)), Some(rustix::fs::Gid::from_raw(self.gid)))
            .unwrap_or_else(|err| panic!("chown {}: {err}", path.display()));
    }
}

/// The attacker and the victim, both in `LAB_GROUP`; None (with a SKIPPED
/// message) when not root or when users cannot be created.
pub fn attacker_and_victim() -> Option<(User, User)> {
    two_in_the_lab("ferryattacker", "ferryvictim")
}

/// Two well-behaved members of `LAB_GROUP`, for sharing tests; None (with a SKIPPED
/// message) when not root or when users cannot be created.
pub fn lab_members() -> Option<(User, User)> {
    two_in_the_lab("ferrymemberone", "ferrymembertwo")
}

fn two_in_the_lab(first: &'static str, second: &'static str) -> Option<(User, User)> {
    if !rustix::process::getuid().is_root() {
        eprintln!("SKIPPED: this test needs root to create unprivileged users");
        return None;
    }
    // Tests in several threads and binaries create the same users at once, and
    // `useradd` fails while another holds /etc/passwd: one creator at a time.
    let lock = std::fs::File::create(std::env::temp_dir().join("ferry-test-users.lock")).unwrap();
    rustix::fs::flock(&lock, rustix::fs::FlockOperation::LockExclusive).unwrap();
    if uzers::get_group_by_name(LAB_GROUP).is_none() {
        let _ = Command::new("groupadd").arg(LAB_GROUP).status();
    }
    Some((user(first)?, user(second)?))
}

fn user(name: &'static str) -> Option<User> {
    if uzers::get_user_by_name(name).is_none() {
        let _ = Command::new("useradd")
            .args(["--no-create-home", "--shell", "/usr/sbin/nologin", "--groups", LAB_GROUP, name])
            .status();
    }
    match uzers::get_user_by_name(name) {
        Some(found) => Some(User { name, uid: found.uid(), gid: found.primary_group_id() }),
        None => {
            eprintln!("SKIPPED: could not create the user {name}");
            None
        }
    }
}

/// Opens `dir` (a test's temporary root, 0700 by default) to every user.
pub fn open_to_all(dir: &Path) {
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o755)).unwrap();
}
