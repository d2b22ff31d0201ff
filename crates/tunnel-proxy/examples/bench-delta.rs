//! What applying a one-route delta (`PATCH /config`) costs the proxy with thousands of routes
//! loaded: `State::apply_delta` timed in a loop, beside a whole-document `State::apply`. No
//! sockets: the push path alone, called inside a runtime as the config API calls it (so what a
//! push replaced is freed on a blocking thread, after the push). For a load-independent figure run it under
//! `valgrind --tool=callgrind --toggle-collect=bench_delta::patch` (instructions of the deltas
//! only; `bench_delta::put` for the whole document; see docs/benchmarks.md).
//!
//! Usage: `bench-delta [ROUTES] [DELTAS]` (default 3000 routes, 200 deltas). The document is
//! shaped as `make bench-propagation`'s: ten routes per Gateway hostname, one PathPrefix rule
//! each, backends from 30 Services; each delta moves one route to another Service.

use std::time::{Duration, Instant};

use serde_json::{Value, json};
use tunnel_proxy::state::{ApplyError, State};

const SERVICES: usize = 30;
const ROUTES_PER_HOST: usize = 10;

fn route(r: usize, service: usize) -> Value {
    json!({
        "kind": "HTTPRoute",
        "name": format!("bench/r-{r}"),
        "hostnames": [format!("gw-{}.bench.example", r / ROUTES_PER_HOST)],
        "rules": [{
            "matches": [{ "path": { "type": "PathPrefix", "value": format!("/r-{r}") } }],
            "backends": [{
                "name": format!("bench/backend-{service}:80"),
                "endpoints": [format!("10.0.{}.{}:8080", service / 200, service % 200 + 1)],
            }],
        }],
    })
}

fn document(version: u64, routes: usize) -> Vec<u8> {
    let listeners: Vec<Value> = (0..routes.div_ceil(ROUTES_PER_HOST))
        .map(|g| json!({ "name": format!("bench/gw-{g}/http"), "hostname": format!("gw-{g}.bench.example") }))
        .collect();
    let routes: Vec<Value> = (0..routes).map(|r| route(r, r % SERVICES)).collect();
    json!({ "version": version, "listeners": listeners, "routes": routes })
        .to_string()
        .into_bytes()
}

/// `PUT /config` without the HTTP exchange; a function of its own for callgrind's toggle.
#[inline(never)]
fn put(state: &State, body: &[u8]) -> Result<u64, ApplyError> {
    state.apply(body)
}

/// `PATCH /config` without the HTTP exchange.
#[inline(never)]
fn patch(state: &State, body: &[u8]) -> Result<u64, ApplyError> {
    state.apply_delta(body)
}

fn main() -> anyhow::Result<()> {
    let mut args = std::env::args().skip(1);
    let routes: usize = args.next().map_or(Ok(3000), |a| a.parse())?;
    let deltas: usize = args.next().map_or(Ok(200), |a| a.parse())?;
    let runtime = tokio::runtime::Runtime::new()?;
    let _in_runtime = runtime.enter();
    let state = State::new();
    let whole = document(1, routes);
    let started = Instant::now();
    put(&state, &whole)?;
    let first = started.elapsed();

    // Spread over the table: the changed route's place changes from one delta to the next.
    let bodies: Vec<Vec<u8>> = (0..deltas)
        .map(|i| {
            let r = (i * 7919) % routes;
            let version = 1 + i as u64;
            json!({
                "baseVersion": version,
                "version": version + 1,
                "start": r,
                "remove": 1,
                "routes": [route(r, (r + i + 1) % SERVICES)],
            })
            .to_string()
            .into_bytes()
        })
        .collect();
    let mut times = Vec::with_capacity(deltas);
    for body in &bodies {
        let started = Instant::now();
        patch(&state, body)?;
        times.push(started.elapsed());
    }
    // The whole document again, replacing the loaded one (a 409 fallback or a resync).
    let again = document(deltas as u64 + 2, routes);
    let started = Instant::now();
    put(&state, &again)?;
    let replacing = started.elapsed();
    times.sort();
    let at = |q: f64| times[((times.len() - 1) as f64 * q).round() as usize];
    let ms = |d: Duration| d.as_secs_f64() * 1e3;
    println!(
        "routes {routes}: whole PUT {:.2} ms, replacing the loaded document {:.2} ms; {deltas} one-route deltas: p50 {:.3} ms, p90 {:.3} ms, max {:.3} ms",
        ms(first),
        ms(replacing),
        ms(at(0.5)),
        ms(at(0.9)),
        ms(at(1.0)),
    );
    Ok(())
}
