//! One sitting of the single-server bench: the broker (started unless a
//! URL is given), then each path measured in turn, and the report.

use orchestrator::broker::{DiskSync, ManagedBroker};
use orchestrator::bus::BusSettings;
use serde_json::json;

use super::args::BrokerSync;
use super::report::{Sitting, Synced};
use super::{
    BenchArgs, a2a, bare, cluster, console, inproc, llm, on_terminal, overload, procs, push,
    rss_mib_of, sink,
};
use crate::cli::output::outln;

pub(super) async fn run(args: &BenchArgs) -> Result<(), String> {
    if args.cluster {
        return cluster::run(args).await;
    }
    let dir = tempfile::tempdir().map_err(|e| e.to_string())?;
    let managed = match &args.nats_url {
        Some(_) => None,
        None => {
            let sync = match args.broker_sync {
                BrokerSync::Always => DiskSync::Always,
                BrokerSync::Both | BrokerSync::Interval => DiskSync::Interval,
            };
            Some(start_broker(dir.path(), sync).await?)
        }
    };
    let url = args
        .nats_url
        .clone()
        .or(managed.as_ref().map(|m| m.url().to_string()))
        .unwrap_or_default();
    let tag = &uuid::Uuid::now_v7().simple().to_string()[20..];
    let bus_config = BusSettings {
        prefix: format!("bench{tag}"),
        ..BusSettings::default()
    };
    if let Some(seconds) = args.overload {
        let m = overload::measure(&url, &format!("bencho{tag}"), dir.path(), args, seconds).await?;
        if args.json {
            outln!("{}", json!({"overload": m.json(args.overload_backlog)}));
        } else {
            if on_terminal() {
                eprint!("\r\x1b[2K");
            }
            m.print(args.overload_backlog);
        }
        if let Some(m) = managed {
            m.stop().await;
        }
        return Ok(());
    }

    let brokers: Vec<u32> = managed.iter().filter_map(ManagedBroker::pid).collect();
    let (bare, bare_cpu) = bare::bare_round_trip(&url, &brokers, tag, 1, args).await?;
    let full = inproc::full_path(&url, bus_config, dir.path(), args).await?;
    let sink = match args.trace_sampling {
        Some(r) if !(0.0..=1.0).contains(&r) => {
            return Err(format!(
                "--trace-sampling {r}: expected a ratio from 0 to 1"
            ));
        }
        Some(r) => Some((sink::start().await?, r)),
        None => None,
    };
    let tracing = sink.as_ref().map(|((url, _), r)| (url.as_str(), *r));
    let rest =
        procs::Deployed::start(&url, &format!("benchp{tag}"), dir.path(), 1, args, tracing).await?;
    let procs::Measured {
        figures: deployed,
        orchestrator_rss,
        cpu,
    } = procs::full_path(&rest, &brokers, args).await?;
    drop(rest);
    let site = procs::Site {
        url: &url,
        dir: dir.path(),
        tag,
        brokers: &brokers,
    };
    let a2a = match args.a2a {
        true => Some(a2a::measure(&site, args).await?),
        false => None,
    };
    let push = match args.push {
        true => Some(push::measure(&site, args).await?),
        false => None,
    };
    let llm = match args.llm {
        true => Some(llm::measure(&site, args).await?),
        false => None,
    };
    let console = match args.console {
        true => Some(console::measure(&site, args).await?),
        false => None,
    };
    let log_path = match args.log_path {
        true => {
            let logged = BenchArgs {
                replicated_store: true,
                ..args.clone()
            };
            let rest = procs::Deployed::start(
                &url,
                &format!("benchl{tag}"),
                &dir.path().join("log-path"),
                1,
                &logged,
                None,
            )
            .await?;
            let measured = procs::full_path(&rest, &brokers, &logged).await?;
            drop(rest);
            Some(measured)
        }
        false => None,
    };
    let synced = match (&managed, args.broker_sync) {
        (Some(_), BrokerSync::Both) => Some(synced_always(dir.path(), tag, args).await?),
        _ => None,
    };
    let exported = sink.as_ref().map(|((_, got), _)| {
        json!({
            "requests": got.requests.load(std::sync::atomic::Ordering::Relaxed),
            "bytes": got.bytes.load(std::sync::atomic::Ordering::Relaxed),
        })
    });

    let sitting = Sitting {
        full,
        deployed,
        orchestrator_rss,
        cpu,
        bare,
        bare_cpu,
        exported,
        a2a,
        push,
        llm,
        console,
        log_path,
        synced,
        broker_sync: match (&managed, args.broker_sync) {
            (None, _) => None,
            (Some(_), BrokerSync::Always) => Some(DiskSync::Always),
            (Some(_), _) => Some(DiskSync::Interval),
        },
        process_rss: rss_mib_of(std::process::id()),
    };
    if args.json {
        outln!("{}", sitting.json(args));
    } else {
        if on_terminal() {
            eprint!("\r\x1b[2K");
        }
        sitting.print(args);
    }
    if let Some(m) = managed {
        m.stop().await;
    }
    Ok(())
}

/// Starts a broker of the bench's own in `dir`, syncing as `sync` says.
async fn start_broker(dir: &std::path::Path, sync: DiskSync) -> Result<ManagedBroker, String> {
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map_err(|e| e.to_string())?
        .port();
    ManagedBroker::start_syncing(dir, port, None, sync)
        .await
        .map_err(|e| e.to_string())
}

/// The bare round trip and the deployed path again, on a second broker
/// of the bench's own with `sync_interval: always`.
async fn synced_always(
    dir: &std::path::Path,
    tag: &str,
    args: &BenchArgs,
) -> Result<Synced, String> {
    let dir = dir.join("sync-always");
    std::fs::create_dir_all(&dir).map_err(|e| e.to_string())?;
    let broker = start_broker(&dir, DiskSync::Always).await?;
    let brokers: Vec<u32> = broker.pid().into_iter().collect();
    let (bare, bare_cpu) =
        bare::bare_round_trip(broker.url(), &brokers, &format!("{tag}s"), 1, args).await?;
    let rest =
        procs::Deployed::start(broker.url(), &format!("benchs{tag}"), &dir, 1, args, None).await?;
    let deployed = procs::full_path(&rest, &brokers, args).await?;
    drop(rest);
    broker.stop().await;
    Ok(Synced {
        bare,
        bare_cpu,
        deployed,
    })
}
