//! Which refusals move a call, and which runner the pool picks.

use super::*;

fn pool(urls: &[&str]) -> Runners {
    let targets = urls
        .iter()
        .map(|u| RunnerTarget::new(u, None).unwrap())
        .collect();
    let cadence = Cadence {
        resolve_every: Duration::from_secs(5),
        health_every: Duration::from_secs(2),
    };
    Runners::new(targets, cadence).unwrap()
}

fn busy(code: &str) -> RunnerError {
    RunnerError::Busy {
        status: 503,
        code: code.into(),
        message: String::new(),
        retry_after: None,
    }
}

#[test]
fn only_refusals_before_the_program_started_move_a_call() {
    assert!(not_started(&RunnerError::Unreachable("refused".into())));
    assert!(not_started(&busy("pool_exhausted")));
    assert!(not_started(&busy("queue_timeout")));
    assert!(not_started(&busy("draining")));
    assert!(not_started(&RunnerError::TooManySandboxes));
    assert!(!not_started(&RunnerError::ConnectionLost("reset".into())));
    assert!(!not_started(&RunnerError::TimedOut(1)));
    assert!(!not_started(&RunnerError::Internal {
        status: 500,
        message: String::new()
    }));
    assert!(is_leaving(&busy("draining")) && is_leaving(&busy("shutting_down")));
    assert!(!is_leaving(&busy("pool_exhausted")));
}

#[test]
fn calls_go_round_healthy_runners_and_skip_the_others() {
    let runners = pool(&[
        "http://127.0.0.1:1",
        "http://127.0.0.1:2",
        "http://127.0.0.1:3",
    ]);
    let members = runners.members();
    for member in &members {
        member.set_state(MemberState::Ok);
    }
    members[1].set_state(MemberState::Unreachable);
    let mut seen = HashSet::new();
    for _ in 0..6 {
        let picked = runners.pick(&[]).unwrap();
        assert_ne!(
            picked.client.id(),
            members[1].client.id(),
            "an unreachable runner"
        );
        seen.insert(picked.client.id());
    }
    assert_eq!(seen.len(), 2, "ties go round the healthy runners");
    // One already tried this round is not picked again; with all tried, none is.
    let first = members[0].client.id();
    let third = members[2].client.id();
    assert_eq!(runners.pick(&[first]).unwrap().client.id(), third);
    assert!(runners.pick(&[first, third]).is_none());
}

#[test]
fn the_runner_with_most_free_sandboxes_is_picked() {
    let runners = pool(&["http://127.0.0.1:1", "http://127.0.0.1:2"]);
    let members = runners.members();
    for (member, available) in members.iter().zip([1, 4]) {
        let mut seen = member.seen.lock().unwrap();
        seen.state = MemberState::Ok;
        seen.available = Some(available);
    }
    for _ in 0..4 {
        assert_eq!(
            runners.pick(&[]).unwrap().client.id(),
            members[1].client.id()
        );
    }
    let _busy: Vec<InFlight> = (0..4).map(|_| InFlight::enter(&members[1])).collect();
    assert_eq!(
        runners.pick(&[]).unwrap().client.id(),
        members[0].client.id()
    );
}

#[tokio::test]
async fn addresses_stand_for_themselves_and_lost_sessions_say_so() {
    let target = RunnerTarget::new("http://10.1.2.3:8081", None).unwrap();
    let expanded = expand(&target).await.unwrap();
    assert_eq!(expanded.len(), 1);
    assert_eq!(expanded[0].url(), target.url());
    let runners = pool(&["http://127.0.0.1:1"]);
    let gone = runners
        .holder(RunnerId::of_url("http://127.0.0.1:2"))
        .unwrap_err();
    assert_eq!(gone.code(), "session_lost");
    assert!(gone.to_string().contains("create_sandbox"), "{gone}");
    assert!(runners
        .holder(RunnerId::of_url("http://127.0.0.1:1"))
        .is_ok());
}
