//! The agent channel's frame decoding, both directions: any bytes either decode to a
//! message or give an error; never a panic, never an allocation past the frame limit.
#![no_main]

use libfuzzer_sys::fuzz_target;
use sandbox_protocol::agent::{AgentMessage, RunnerMessage};
use sandbox_protocol::frame;

fuzz_target!(|data: &[u8]| {
    let mut from_runner = data;
    while let Ok(Some(_)) = frame::read::<_, RunnerMessage>(&mut from_runner) {}
    let mut from_agent = data;
    while let Ok(Some(message)) = frame::read::<_, AgentMessage>(&mut from_agent) {
        // What decodes encodes again.
        let bytes = frame::encode(&message).expect("a decoded message encodes");
        let again: AgentMessage = frame::read(&mut bytes.as_slice())
            .expect("re-reading")
            .expect("a frame");
        assert_eq!(again, message);
    }
});
