//! Replays the committed corpus and the regression inputs through every
//! target on the stable toolchain, without cargo-fuzz: `cargo test` in
//! fuzz/. A debugger-friendly way to reproduce a finding, too: drop the
//! input into fuzz/corpus/<target>/ and run this.

use arbitrary::{Arbitrary, Unstructured};
use std::path::Path;

fn replay(target: &str, run: impl Fn(&[u8])) -> usize {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("corpus")
        .join(target);
    let Ok(entries) = std::fs::read_dir(&dir) else {
        return 0;
    };
    let mut n = 0;
    for entry in entries {
        let path = entry.expect("corpus entry").path();
        let data = std::fs::read(&path).expect("corpus file");
        eprintln!("{}", path.display());
        run(&data);
        n += 1;
    }
    n
}

#[test]
fn request_frame_corpus() {
    assert!(replay("request_frame", kaas_fuzz::request_frame) > 0);
}

#[test]
fn roundtrip_corpus() {
    replay("request_frame", kaas_fuzz::roundtrip);
    assert!(replay("roundtrip", kaas_fuzz::roundtrip) > 0);
}

#[test]
fn record_batch_corpus() {
    assert!(replay("record_batch", kaas_fuzz::record_batch) > 0);
}

#[test]
fn state_files_corpus() {
    assert!(replay("state_files", kaas_fuzz::state_files) > 0);
}

#[test]
fn state_machines_corpus() {
    replay("state_machines", |data| {
        // As libfuzzer-sys builds a structured input.
        if let Ok(script) = kaas_fuzz::Script::arbitrary_take_rest(Unstructured::new(data)) {
            kaas_fuzz::state_machines(script);
        }
    });
}

#[test]
fn broker_requests_corpus() {
    replay("request_frame", kaas_fuzz::broker_requests);
    replay("broker_requests", kaas_fuzz::broker_requests);
}

/// The generated volume seed is a healthy volume: a broker opens it with its
/// topics, data and committed offsets (so mutations start from real state).
#[test]
fn generated_volume_seed_opens_with_its_topics_and_offsets() {
    use kaas_fuzz::{archive, mem_volume::MemVolume};
    use kaas_net::volume::Volume;
    use std::sync::Arc;
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("corpus/state_files");
    let seed = std::fs::read_dir(&dir)
        .expect("state_files corpus")
        .map(|e| e.expect("entry").path())
        .find(|p| p.to_string_lossy().contains("gen-volume"))
        .expect("a gen-volume seed");
    let data = std::fs::read(seed).expect("seed");
    let volume = Arc::new(MemVolume::new());
    for (path, content) in archive::decode(&data[1..]) {
        volume.put(path, content);
    }
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");
    rt.block_on(async {
        let dynvol: Arc<dyn Volume> = volume;
        let config = kaas_net::BrokerConfig::new(([127, 0, 0, 1], 9092).into());
        let broker = kaas_net::Broker::open(config, dynvol, kaas_net::env::Env::in_place())
            .expect("the seed volume opens");
        let t0 = broker.partition("t", 0, -1).expect("t-0");
        assert_eq!(t0.high_watermark(), 120);
        assert!(broker.partition("u", 0, -1).is_ok());
        let offsets = broker
            .groups
            .fetch_offsets("g", Some(&[("t".to_string(), vec![0])]), false)
            .expect("a broker alone serves every group slot");
        let committed = offsets[0].1[0].committed.clone();
        assert_eq!(committed.map(|c| c.map(|c| c.offset)), Ok(Some(42)));
    });
}
