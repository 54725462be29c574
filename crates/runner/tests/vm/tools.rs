//! Tools called from code on the vm backend: the guest's init relays the jailed agent's
//! calls up and their answers down while the program runs, so that a program in a VM
//! calls the tools its caller offers as one in a process sandbox does.

use super::*;
use common::tools::{result, run_with_tools};

#[tokio::test]
async fn a_program_in_a_guest_calls_the_offered_tools() {
    let _serial = SERIAL.lock().await;
    let runner = vm_runner(1, &state_dir("tools"));
    wait_available(&runner).await;
    let code = "import tools\nprint(tools.docs.find(q='vm')['pages'][0])\n\
                try:\n    tools.docs.fail_always()\nexcept tools.ToolError as e:\n    print(e)";
    let run = tokio::time::timeout(
        REQUEST_BOUND,
        run_with_tools(&runner, "/run", "python", code, true),
    )
    .await
    .expect("an answer within the bound");
    assert_eq!(
        result(&run)["stdout"],
        "vm-1\nthe upstream said no\n",
        "{}",
        run.last
    );
    assert_eq!(run.calls.len(), 2, "{:?}", run.calls);
}
