//! TCG's translation cache holds what a guest translates while it boots and serves its
//! first run: a full cache is flushed whole, and the warm run then translates again the
//! code the boot had translated.

use super::*;

/// The translation cache of a QEMU process: its large executable anonymous mapping,
/// as (size, resident) in KiB.
fn translation_cache_kib(pid: &str) -> Option<(u64, u64)> {
    let smaps = std::fs::read_to_string(format!("/proc/{pid}/smaps")).ok()?;
    let mut current: Option<u64> = None;
    for line in smaps.lines() {
        let fields: Vec<&str> = line.split_whitespace().collect();
        if let Some((start, end)) = fields.first().and_then(|range| range.split_once('-')) {
            let (Ok(start), Ok(end)) =
                (u64::from_str_radix(start, 16), u64::from_str_radix(end, 16))
            else {
                continue;
            };
            let executable = fields.get(1).is_some_and(|perms| perms.contains('x'));
            let anonymous = fields.len() < 6;
            let size = (end - start) / 1024;
            current = (executable && anonymous && size >= 32 * 1024).then_some(size);
        } else if let (Some(size), Some(&"Rss:")) = (current, fields.first()) {
            let resident = fields.get(1)?.parse().ok()?;
            return Some((size, resident));
        }
    }
    None
}

#[tokio::test]
async fn a_warm_vm_has_room_left_in_its_translation_cache() {
    let _serial = SERIAL.lock().await;
    let state = state_dir("tcg-cache");
    let runner = vm_runner(1, &state);
    wait_available(&runner).await;
    let out = runner.run("python", "print(1)").await;
    assert_eq!(stdout(&out), "1\n", "{out}");
    // The next VM, booted and prepared, at rest.
    wait_available(&runner).await;
    tokio::time::sleep(Duration::from_secs(2)).await;
    let processes = qemu_processes(&state);
    let pid = processes
        .first()
        .and_then(|p| p.split(':').next())
        .expect("a warm VM's QEMU");
    let (size, resident) = translation_cache_kib(pid).expect("QEMU's translation cache");
    assert!(
        resident + 8 * 1024 < size,
        "the translation cache is full at rest ({resident} of {size} KiB resident): the \
         boot's code was flushed and the first run translates it again"
    );
}
