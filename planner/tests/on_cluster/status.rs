//! `planner cluster status` tells a live member from a dead one, and sees it come back:
//! reachability, last contact as a time, and log lag per member.

use super::*;

/// The status line of member `id`.
fn member(status: &str, id: u64) -> Result<String> {
    status
        .lines()
        .find(|l| l.starts_with(&format!("n{id},")))
        .map(str::to_owned)
        .with_context(|| format!("no line for n{id} in:\n{status}"))
}

#[test]
fn cluster_status_shows_a_killed_peer_as_unreachable_and_its_return() -> Result<()> {
    let mut cluster = TestCluster::start(3)?;
    let leader = cluster.wait_leader(Duration::from_secs(10))?;
    let victim = (1..=3).find(|i| *i != leader).context("no follower")?;
    let status =
        |c: &TestCluster| c.cli(env!("CARGO_BIN_EXE_planner"), &["cluster", "status"], None);
    // Wait for the first heartbeats to be answered.
    let deadline = std::time::Instant::now() + Duration::from_secs(15);
    let before = loop {
        let s = status(&cluster)?;
        if (1..=3).all(|id| member(&s, id).is_ok_and(|l| l.contains(",yes,"))) {
            break s;
        }
        ensure!(
            std::time::Instant::now() < deadline,
            "never all reachable:\n{s}"
        );
        std::thread::sleep(Duration::from_millis(200));
    };
    ensure!(
        before.contains("peer,role,address,reachable,last_contact,log_lag,running_batches"),
        "{before}"
    );
    for id in 1..=3 {
        let line = member(&before, id)?;
        // Last contact as a UTC time (`2026-12-02 03:49:31.004Z`).
        let last = line.split(',').nth(4).context("no last-contact column")?;
        ensure!(last.ends_with('Z') && last.contains(' '), "{line}");
        // The leader knows every member's lag: a number, not "-".
        let lag = line.split(',').nth(5).context("no lag column")?;
        ensure!(lag.parse::<u64>().is_ok(), "lag {lag:?} in {line}");
    }
    // No epoch milliseconds anywhere: times are shown as times.
    ensure!(
        !before
            .split(|c: char| !c.is_ascii_digit())
            .any(|n| n.len() >= 13),
        "an epoch-millisecond number in:\n{before}"
    );

    cluster.kill(victim)?;
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    let after = loop {
        let s = status(&cluster)?;
        if member(&s, victim).is_ok_and(|l| l.contains(",no,")) {
            break s;
        }
        ensure!(
            std::time::Instant::now() < deadline,
            "n{victim} still reachable after its kill:\n{s}"
        );
        std::thread::sleep(Duration::from_millis(300));
    };
    let dead = member(&after, victim)?;
    ensure!(dead.contains(",voter,"), "still a member: {dead}");
    for id in (1..=3).filter(|i| *i != victim) {
        ensure!(member(&after, id)?.contains(",yes,"), "{after}");
    }

    cluster.restart(victim)?;
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    loop {
        let s = status(&cluster)?;
        if member(&s, victim).is_ok_and(|l| l.contains(",yes,")) {
            break;
        }
        ensure!(
            std::time::Instant::now() < deadline,
            "n{victim} not reachable after its restart:\n{s}"
        );
        std::thread::sleep(Duration::from_millis(300));
    }
    Ok(())
}
