//! What RCNS (seed 000; SPEC §13 `[rcns]`) keeps between requests: its settings, the callers
//! file (swapped whole on reload, as the bundle is) and the per-agent PROPOSE rate.

use std::sync::Arc;

use palisade_rich::rcns::Callers;

use crate::config::Rcns;
use crate::net::rate::Rate;

pub struct RcnsState {
    pub config: Rcns,
    pub callers: arc_swap::ArcSwap<Callers>,
    /// PROPOSE per minute per agent id.
    pub rate: Rate<String>,
}

impl RcnsState {
    /// Reads the callers file; `Err` lists every problem.
    pub fn load(config: &Rcns) -> Result<Self, Vec<String>> {
        Ok(Self {
            callers: arc_swap::ArcSwap::from_pointee(read_callers(config)?),
            rate: Rate::per_minute(config.rate_limit),
            config: config.clone(),
        })
    }

    /// Reads the callers file again and puts it in force; on a problem the old one stays.
    pub fn reload(&self) -> Result<(), Vec<String>> {
        let callers = read_callers(&self.config)?;
        self.callers.store(Arc::new(callers));
        Ok(())
    }
}

fn read_callers(config: &Rcns) -> Result<Callers, Vec<String>> {
    let path = &config.callers;
    let bytes = std::fs::read(path)
        .map_err(|e| vec![format!("rcns.callers: cannot read {}: {e}", path.display())])?;
    Callers::parse(&bytes).map_err(|ps| {
        ps.iter()
            .map(|p| format!("rcns.callers ({}): {p}", path.display()))
            .collect()
    })
}
