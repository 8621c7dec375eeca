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

/// An executor peer is recorded by `planner cluster add --executor`, not replicated to: it
/// holds until it is recorded, shows as an executor in `planner cluster status`, stays out of
/// openraft's voters and learners, cannot be added as a voter meanwhile, and holds again once
/// `planner cluster remove` forgets it.
#[test]
fn an_executor_peer_is_recorded_not_replicated() -> Result<()> {
    let mut cluster = TestCluster::start(3)?;
    let (id, addr) = cluster.start_executor(false)?;
    let planner = env!("CARGO_BIN_EXE_planner");
    let held = |c: &TestCluster| -> Result<bool> {
        let p = c.executor_peer(id).context("the executor peer is gone")?;
        Ok(p.executor().refusal().is_some())
    };
    let wait = |c: &TestCluster, want_held: bool, what: &str| -> Result<()> {
        let deadline = std::time::Instant::now() + Duration::from_secs(15);
        while held(c)? != want_held {
            ensure!(std::time::Instant::now() < deadline, "n{id}: {what}");
            std::thread::sleep(Duration::from_millis(100));
        }
        Ok(())
    };
    // Not recorded yet: it follows the ledger but executes nothing, even once the key check
    // is settled (it then holds for that reason alone).
    let deadline = std::time::Instant::now() + Duration::from_secs(15);
    loop {
        let p = cluster
            .executor_peer(id)
            .context("the executor peer is gone")?;
        let refusal = p.executor().refusal();
        ensure!(refusal.is_some(), "n{id} executes before it was added");
        if p.core().version().is_some()
            && refusal
                .as_deref()
                .is_some_and(|r| r.contains("not recorded as an executor peer"))
        {
            break;
        }
        ensure!(
            std::time::Instant::now() < deadline,
            "n{id} never settled its key check and followed the ledger: {refusal:?}, \
             version {:?}",
            p.core().version()
        );
        std::thread::sleep(Duration::from_millis(50));
    }

    let name = format!("n{id}");
    let out = cluster.cli(
        planner,
        &["cluster", "add", "--executor", &name, &addr],
        None,
    )?;
    ensure!(out.contains("executor peer"), "{out}");
    wait(
        &cluster,
        false,
        "still holding after cluster add --executor",
    )?;

    let deadline = std::time::Instant::now() + Duration::from_secs(15);
    let s = loop {
        let s = cluster.cli(planner, &["cluster", "status"], None)?;
        if member(&s, id).is_ok_and(|l| l.contains(",yes,")) {
            break s;
        }
        ensure!(
            std::time::Instant::now() < deadline,
            "n{id} never reachable:\n{s}"
        );
        std::thread::sleep(Duration::from_millis(200));
    };
    let line = member(&s, id)?;
    ensure!(
        line.starts_with(&format!("{name},executor,{addr},yes,")),
        "{line}"
    );
    // Raft knows nothing of it: the leader replicates to the three voters only.
    let leader = cluster.wait_leader(Duration::from_secs(10))?;
    let st = cluster.peer(leader).context("leader")?.core().status();
    ensure!(
        st.voters.len() == 3 && st.learners.is_empty() && !st.matched.contains_key(&id),
        "an executor peer in Raft's membership: {st:?}"
    );
    ensure!(st.executors.get(&id) == Some(&addr), "{st:?}");
    // Its id cannot be made a voter while it is an executor peer.
    let voter = cluster.cli(planner, &["cluster", "add", &name, &addr], None);
    ensure!(
        voter
            .as_ref()
            .is_err_and(|e| e.to_string().contains("executor peer")),
        "added as a voter too: {voter:?}"
    );

    cluster.cli(planner, &["cluster", "remove", &name], None)?;
    wait(&cluster, true, "still executing after cluster remove")?;
    let s = cluster.cli(planner, &["cluster", "status"], None)?;
    ensure!(member(&s, id).is_err(), "still listed after remove:\n{s}");
    Ok(())
}
