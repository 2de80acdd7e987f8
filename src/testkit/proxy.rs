//! [`FaultProxy`]: a fault-injecting TCP proxy for the backend tests (docs/testing.md, "The
//! backends through a proxy"). It listens on a loopback port and forwards each accepted
//! connection (a *flow*) to one upstream address, and each flow can be told to misbehave the
//! ways a network does without telling either end:
//!
//! ```text
//!  client ──► [ c→s: stall? hold? delay? ] ──► server      Flow::stall     both ways stop, no reset
//!  client ◄── [ s→c: stall? drop? delay? ] ◄── server      Flow::hold      c→s bytes kept back,
//!                                                                           Flow::release_held delivers them
//!                                                          Flow::drop_next_answer
//!                                                                           the server's answer to the
//!                                                                           next request never arrives
//! ```
//!
//! Bounded: at most [`MAX_FLOWS`] flows (more connections are closed at once) and at most
//! [`MAX_HELD`] bytes kept back per flow (a flow holding more stops reading its client, as a full
//! network buffer would). It stops by itself when dropped: the accept loop and every flow end,
//! and both ends of each flow are closed.

use std::fmt;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::tcp::{OwnedReadHalf, OwnedWriteHalf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;
use tokio::task::{JoinHandle, JoinSet};

/// The most flows one proxy forwards; a connection beyond them is closed at once.
pub const MAX_FLOWS: usize = 64;

/// The most client→server bytes one flow keeps back while held.
pub const MAX_HELD: usize = 1 << 20;

/// The size of one read.
const CHUNK: usize = 16 * 1024;

/// A TCP proxy on a loopback port in front of one upstream, with per-flow faults.
pub struct FaultProxy {
    /// The loopback address it listens on.
    addr: SocketAddr,
    /// Every flow accepted so far, in order.
    flows: Arc<Mutex<Vec<Flow>>>,
    /// Bumped at every accepted flow, to wait for one.
    accepted: watch::Receiver<usize>,
    /// The accept loop; it owns the flows' tasks, so aborting it ends them all.
    task: JoinHandle<()>,
    /// Faults for the next flow accepted, set before it forwards a byte.
    next: NextFlow,
}

/// What [`FaultProxy::on_next_flow`] does to the next flow accepted.
type NextFlow = Arc<Mutex<Option<Box<dyn FnOnce(&Flow) + Send>>>>;

impl fmt::Debug for FaultProxy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("FaultProxy")
            .field("addr", &self.addr)
            .field("flows", &self.flows().len())
            .finish()
    }
}

impl Drop for FaultProxy {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl FaultProxy {
    /// Listens on `127.0.0.1` (a free port) and forwards every connection to `upstream`
    /// (`host:port`). A connection whose upstream cannot be reached is closed.
    pub async fn start(upstream: &str) -> std::io::Result<Self> {
        let listener = TcpListener::bind("127.0.0.1:0").await?;
        let addr = listener.local_addr()?;
        let flows: Arc<Mutex<Vec<Flow>>> = Arc::default();
        let (bump, accepted) = watch::channel(0);
        let next: NextFlow = Arc::default();
        let task = tokio::spawn(accept_loop(
            listener,
            upstream.to_owned(),
            flows.clone(),
            bump,
            next.clone(),
        ));
        Ok(Self {
            addr,
            flows,
            accepted,
            task,
            next,
        })
    }

    /// Runs `arm` on the next flow accepted before it forwards a byte (`|f| f.hold()`): the
    /// faults of a request on a connection not open yet, for servers that close every
    /// connection after one answer (moto does). Replaces an `arm` not used yet.
    pub fn on_next_flow(&self, arm: impl FnOnce(&Flow) + Send + 'static) {
        *lock(&self.next) = Some(Box::new(arm));
    }

    /// The loopback address clients connect to.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// Every flow accepted so far, oldest first.
    pub fn flows(&self) -> Vec<Flow> {
        lock(&self.flows).clone()
    }

    /// The newest flow, if any.
    pub fn last_flow(&self) -> Option<Flow> {
        lock(&self.flows).last().cloned()
    }

    /// Waits until at least `n` flows were accepted, or `limit` passed; returns whether they were.
    pub async fn wait_for_flows(&self, n: usize, limit: Duration) -> bool {
        let mut accepted = self.accepted.clone();
        let reached = tokio::time::timeout(limit, accepted.wait_for(|&count| count >= n)).await;
        matches!(reached, Ok(Ok(_)))
    }
}

async fn accept_loop(
    listener: TcpListener,
    upstream: String,
    flows: Arc<Mutex<Vec<Flow>>>,
    accepted: watch::Sender<usize>,
    next: NextFlow,
) {
    let mut running = JoinSet::new();
    while let Ok((client, _)) = listener.accept().await {
        if lock(&flows).len() >= MAX_FLOWS {
            drop(client);
            continue;
        }
        let Ok(server) = TcpStream::connect(&upstream).await else {
            continue;
        };
        let flow = Flow::new();
        if let Some(arm) = lock(&next).take() {
            arm(&flow);
        }
        lock(&flows).push(flow.clone());
        running.spawn(flow.clone().forward(client, server));
        accepted.send_modify(|count| *count += 1);
        while running.try_join_next().is_some() {}
    }
}

/// What a flow is told to do, and what went through it.
#[derive(Debug, Default)]
struct FlowState {
    /// Nothing moves either way.
    stalled: bool,
    /// Client→server bytes are kept in `held` instead of forwarded.
    holding: bool,
    /// The bytes kept back.
    held: Vec<u8>,
    /// The next client→server chunk starts dropping the server's answer.
    drop_armed: bool,
    /// Server→client bytes are dropped until the client sends again.
    dropping: bool,
    /// The client closed its side (or it failed).
    client_done: bool,
    /// A server's close after a dropped answer is passed on at once.
    pass_close: bool,
    /// Each client→server chunk waits this long before it is forwarded.
    delay: Duration,
    /// Each server→client chunk waits this long before it is forwarded.
    down_delay: Duration,
    /// Client→server bytes forwarded.
    to_server: u64,
    /// Server→client bytes read from the server (dropped or not).
    from_server: u64,
}

/// One forwarded connection; clones control the same flow.
#[derive(Clone)]
pub struct Flow {
    /// The faults and the counters.
    state: Arc<Mutex<FlowState>>,
    /// Bumped at every change of `state`, to wake the forwarding tasks and waiters.
    changed: Arc<watch::Sender<u64>>,
    /// The server end; client→server writes and deliveries of held bytes take turns on it, so
    /// the server reads bytes in the order the client sent them.
    to_server: Arc<tokio::sync::Mutex<Option<OwnedWriteHalf>>>,
}

impl fmt::Debug for Flow {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let s = lock(&self.state);
        f.debug_struct("Flow")
            .field("stalled", &s.stalled)
            .field("holding", &s.holding)
            .field("held", &s.held.len())
            .field("to_server", &s.to_server)
            .field("from_server", &s.from_server)
            .finish_non_exhaustive()
    }
}

impl Flow {
    fn new() -> Self {
        let (changed, _) = watch::channel(0);
        Self {
            state: Arc::default(),
            changed: Arc::new(changed),
            to_server: Arc::default(),
        }
    }

    fn update<T>(&self, change: impl FnOnce(&mut FlowState) -> T) -> T {
        let out = change(&mut lock(&self.state));
        self.changed.send_modify(|n| *n += 1);
        out
    }

    /// Waits until `ready` holds for the state.
    async fn wait_until(&self, ready: impl Fn(&FlowState) -> bool) {
        let mut changed = self.changed.subscribe();
        while !ready(&lock(&self.state)) {
            if changed.changed().await.is_err() {
                return;
            }
        }
    }

    /// Stops forwarding both ways, silently: no reset, no close; both ends just hear nothing.
    pub fn stall(&self) {
        self.update(|s| s.stalled = true);
    }

    /// Forwards again after [`Flow::stall`].
    pub fn resume(&self) {
        self.update(|s| s.stalled = false);
    }

    /// From now on, client→server bytes are kept back (the server's answers still flow).
    pub fn hold(&self) {
        self.update(|s| s.holding = true);
    }

    /// Delivers the bytes kept back since [`Flow::hold`], in order, and forwards normally again;
    /// returns how many bytes were delivered.
    pub async fn release_held(&self) -> std::io::Result<usize> {
        let mut server = self.to_server.lock().await;
        let held = self.update(|s| {
            s.holding = false;
            std::mem::take(&mut s.held)
        });
        if let Some(w) = server.as_mut() {
            w.write_all(&held).await?;
        }
        self.update(|s| s.to_server += held.len() as u64);
        Ok(held.len())
    }

    /// The server's answer to the next request is dropped: every server→client byte after the
    /// client's next chunk, until the client sends again; a close by the server meanwhile is
    /// not passed on either (the client hears nothing until it closes the connection).
    pub fn drop_next_answer(&self) {
        self.update(|s| s.drop_armed = true);
    }

    /// A close by the server after a dropped answer reaches the client at once: a connection
    /// cut after the server applied the request, where [`Flow::drop_next_answer`] alone is an
    /// answer lost in a silent network.
    pub fn pass_close_after_dropped_answer(&self) {
        self.update(|s| s.pass_close = true);
    }

    /// Closes the flow's side towards the server, as a client that went away would: the
    /// server reads the end of its input (an HTTP server then closes the connection, which
    /// [`Flow::pass_close_after_dropped_answer`] passes on to the client).
    pub async fn close_server_side(&self) {
        if let Some(w) = self.to_server.lock().await.as_mut() {
            let _ = w.shutdown().await;
        }
    }

    /// Each later client→server chunk waits `delay` before it is forwarded.
    pub fn set_delay(&self, delay: Duration) {
        self.update(|s| s.delay = delay);
    }

    /// Each later server→client chunk waits `delay` before it is forwarded: a slow download.
    pub fn set_download_delay(&self, delay: Duration) {
        self.update(|s| s.down_delay = delay);
    }

    /// How many client→server bytes are kept back now.
    pub fn held_bytes(&self) -> usize {
        lock(&self.state).held.len()
    }

    /// Client→server bytes forwarded so far.
    pub fn bytes_to_server(&self) -> u64 {
        lock(&self.state).to_server
    }

    /// Server→client bytes read from the server so far, dropped ones included.
    pub fn bytes_from_server(&self) -> u64 {
        lock(&self.state).from_server
    }

    /// Waits until the server has sent more than `seen` bytes on this flow (an answer arrived),
    /// or `limit` passed; returns whether it did.
    pub async fn wait_from_server_beyond(&self, seen: u64, limit: Duration) -> bool {
        let arrived = self.wait_until(|s| s.from_server > seen);
        tokio::time::timeout(limit, arrived).await.is_ok()
    }

    /// Forwards until both directions end.
    async fn forward(self, client: TcpStream, server: TcpStream) {
        let (client_r, client_w) = client.into_split();
        let (server_r, server_w) = server.into_split();
        *self.to_server.lock().await = Some(server_w);
        let up = self.clone().client_to_server(client_r);
        let down = self.clone().server_to_client(server_r, client_w);
        tokio::join!(up, down);
    }

    async fn client_to_server(self, mut client: OwnedReadHalf) {
        let mut buf = vec![0; CHUNK];
        loop {
            self.wait_until(|s| !s.stalled && s.held.len() < MAX_HELD)
                .await;
            let n = match client.read(&mut buf).await {
                Ok(0) | Err(_) => break,
                Ok(n) => n,
            };
            self.wait_until(|s| !s.stalled).await;
            let delay = lock(&self.state).delay;
            if !delay.is_zero() {
                tokio::time::sleep(delay).await;
            }
            if !self.send_up(&buf[..n]).await {
                return;
            }
        }
        self.update(|s| s.client_done = true);
        // The client closed: deliver what is held first, then pass the close on.
        self.wait_until(|s| !s.holding && !s.stalled).await;
        if let Some(w) = self.to_server.lock().await.as_mut() {
            let _ = w.shutdown().await;
        }
    }

    /// Forwards one client chunk, or keeps it back while holding; false once the server is gone.
    async fn send_up(&self, chunk: &[u8]) -> bool {
        let mut server = self.to_server.lock().await;
        let kept = self.update(|s| {
            if s.holding {
                s.held.extend_from_slice(chunk);
                return true;
            }
            s.dropping = std::mem::take(&mut s.drop_armed);
            false
        });
        if kept {
            return true;
        }
        let Some(w) = server.as_mut() else {
            return false;
        };
        if w.write_all(chunk).await.is_err() {
            return false;
        }
        self.update(|s| s.to_server += chunk.len() as u64);
        true
    }

    async fn server_to_client(self, mut server: OwnedReadHalf, mut client: OwnedWriteHalf) {
        let mut buf = vec![0; CHUNK];
        let mut client_gone = false;
        loop {
            self.wait_until(|s| !s.stalled).await;
            let n = match server.read(&mut buf).await {
                Ok(0) | Err(_) => break,
                Ok(n) => n,
            };
            self.wait_until(|s| !s.stalled).await;
            let delay = lock(&self.state).down_delay;
            if !delay.is_zero() {
                tokio::time::sleep(delay).await;
            }
            let dropping = self.update(|s| {
                s.from_server += n as u64;
                s.dropping
            });
            if !dropping && !client_gone {
                // A client that left is not an error: keep reading, so late answers are seen.
                client_gone = client.write_all(&buf[..n]).await.is_err();
            }
        }
        // A close that follows a dropped answer is dropped too: the client hears nothing until
        // it gives up on the connection itself.
        self.wait_until(|s| !s.dropping || s.client_done || s.pass_close)
            .await;
        let _ = client.shutdown().await;
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An echo server on loopback; returns its address.
    async fn echo() -> SocketAddr {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        tokio::spawn(async move {
            while let Ok((mut s, _)) = listener.accept().await {
                tokio::spawn(async move {
                    let (mut r, mut w) = s.split();
                    let _ = tokio::io::copy(&mut r, &mut w).await;
                });
            }
        });
        addr
    }

    async fn roundtrip(c: &mut TcpStream, msg: &[u8]) -> Option<Vec<u8>> {
        c.write_all(msg).await.unwrap();
        let mut got = vec![0; msg.len()];
        let read = tokio::time::timeout(Duration::from_millis(200), c.read_exact(&mut got));
        match read.await {
            Ok(Ok(_)) => Some(got),
            _ => None,
        }
    }

    #[tokio::test]
    async fn a_flow_forwards_stalls_holds_and_drops_on_command() {
        let proxy = FaultProxy::start(&echo().await.to_string()).await.unwrap();
        let mut c = TcpStream::connect(proxy.addr()).await.unwrap();
        assert_eq!(
            roundtrip(&mut c, b"one").await.as_deref(),
            Some(&b"one"[..])
        );
        let flow = proxy.last_flow().unwrap();

        flow.stall();
        assert_eq!(
            roundtrip(&mut c, b"two").await,
            None,
            "a stalled flow is silent"
        );
        flow.resume();
        let mut late = [0; 3];
        c.read_exact(&mut late).await.unwrap();
        assert_eq!(&late, b"two", "a resumed flow delivers what waited");

        flow.hold();
        c.write_all(b"three").await.unwrap();
        let held = flow.wait_until(|s| s.held.len() == 5);
        tokio::time::timeout(Duration::from_secs(5), held)
            .await
            .expect("the bytes are kept back");
        assert_eq!(flow.bytes_to_server(), 6, "none of them went on");
        let seen = flow.bytes_from_server();
        assert_eq!(flow.release_held().await.unwrap(), 5);
        assert!(
            flow.wait_from_server_beyond(seen, Duration::from_secs(5))
                .await
        );
        let mut echoed = [0; 5];
        c.read_exact(&mut echoed).await.unwrap();
        assert_eq!(&echoed, b"three");

        flow.drop_next_answer();
        let seen = flow.bytes_from_server();
        assert_eq!(
            roundtrip(&mut c, b"four").await,
            None,
            "the answer is dropped"
        );
        assert!(
            flow.bytes_from_server() > seen,
            "though the server answered"
        );
        assert_eq!(
            roundtrip(&mut c, b"five").await.as_deref(),
            Some(&b"five"[..])
        );
    }

    #[tokio::test]
    async fn the_next_flow_is_armed_before_its_first_byte() {
        let proxy = FaultProxy::start(&echo().await.to_string()).await.unwrap();
        proxy.on_next_flow(Flow::hold);
        let mut c = TcpStream::connect(proxy.addr()).await.unwrap();
        assert_eq!(roundtrip(&mut c, b"one").await, None, "held from the start");
        let flow = proxy.last_flow().unwrap();
        assert_eq!((flow.held_bytes(), flow.bytes_to_server()), (3, 0));
        let mut other = TcpStream::connect(proxy.addr()).await.unwrap();
        assert!(
            roundtrip(&mut other, b"two").await.is_some(),
            "only the next flow"
        );
    }

    #[tokio::test]
    async fn a_dropped_proxy_closes_its_flows_and_its_port() {
        let proxy = FaultProxy::start(&echo().await.to_string()).await.unwrap();
        let addr = proxy.addr();
        let mut c = TcpStream::connect(addr).await.unwrap();
        assert!(roundtrip(&mut c, b"x").await.is_some());
        drop(proxy);
        let mut rest = Vec::new();
        let closed = tokio::time::timeout(Duration::from_secs(5), c.read_to_end(&mut rest)).await;
        assert!(matches!(closed, Ok(Ok(0)) | Ok(Err(_))), "{closed:?}");
        let again = tokio::time::timeout(Duration::from_secs(5), TcpStream::connect(addr)).await;
        assert!(matches!(again, Ok(Err(_))), "the port is closed: {again:?}");
    }
}
