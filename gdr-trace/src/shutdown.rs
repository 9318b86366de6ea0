//! SIGTERM, caught from the start. A service manager or Kubernetes may stop `serve` while it
//! is still loading its programs (seconds): the handler must exist before then, or the process
//! dies by the signal instead of ending cleanly. [`install`] registers it once, on a thread of
//! its own, and remembers a request; the trace loop waits on [`requests`], which sees a SIGTERM
//! that came before it started waiting.

use std::sync::OnceLock;

use tokio::sync::watch;

static TERM: OnceLock<watch::Sender<bool>> = OnceLock::new();

/// Installs the SIGTERM handler (idempotent); returns once it is in place.
pub fn install() -> std::io::Result<()> {
    if TERM.get().is_some() {
        return Ok(());
    }
    let (ready_tx, ready_rx) = std::sync::mpsc::channel();
    std::thread::Builder::new().name("sigterm".into()).spawn(move || {
        crate::privilege::drop_all_in_this_thread();
        let rt = match tokio::runtime::Builder::new_current_thread().enable_all().build() {
            Ok(rt) => rt,
            Err(e) => return drop(ready_tx.send(Err(e))),
        };
        rt.block_on(async move {
            let mut sig = match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
                Ok(s) => s,
                Err(e) => return drop(ready_tx.send(Err(e))),
            };
            let tx = TERM.get_or_init(|| watch::channel(false).0);
            let _ = ready_tx.send(Ok(()));
            while sig.recv().await.is_some() {
                tx.send_replace(true);
            }
        })
    })?;
    ready_rx.recv().map_err(|_| std::io::Error::other("the SIGTERM thread ended"))?
}

/// SIGTERM requests, past and future (installs the handler if needed).
pub fn requests() -> std::io::Result<Requests> {
    install()?;
    let tx = TERM.get().ok_or_else(|| std::io::Error::other("SIGTERM handler missing"))?;
    Ok(Requests(tx.subscribe()))
}

pub struct Requests(watch::Receiver<bool>);

impl Requests {
    /// Resolves once SIGTERM has been received (at once if it came already).
    pub async fn recv(&mut self) {
        if self.0.wait_for(|t| *t).await.is_err() {
            std::future::pending::<()>().await
        }
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn a_sigterm_before_anyone_waits_is_kept() {
        super::install().unwrap();
        // SAFETY: raise(3) on ourselves; the handler installed above catches it.
        assert_eq!(unsafe { libc::raise(libc::SIGTERM) }, 0);
        std::thread::sleep(std::time::Duration::from_millis(200));
        let mut r = super::requests().unwrap();
        let rt = tokio::runtime::Builder::new_current_thread().enable_time().build().unwrap();
        let got =
            rt.block_on(async { tokio::time::timeout(std::time::Duration::from_secs(5), r.recv()).await });
        assert!(got.is_ok(), "the earlier SIGTERM was remembered");
    }
}
