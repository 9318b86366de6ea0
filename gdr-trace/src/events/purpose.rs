//! What a kernel pin of user memory was for: the verb its thread was in (a registration's or a
//! queue's) and whether it was a doorbell record's page, as the verb hooks saw it
//! (`gdr_trace_common::queues`). Pins and their releases carry it.

use gdr_trace_common::queues::{is_doorbell, PinVerb};
use serde::{Deserialize, Serialize};

/// The verb a pin was made in.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Verb {
    /// reg_mr, rereg_mr, reg_dmabuf_mr.
    #[serde(rename = "reg_mr")]
    Register,
    CreateCq,
    CreateQp,
    CreateSrq,
    CreateWq,
    /// mlx5's DEVX UMEM registration.
    DevxUmemReg,
}

impl Verb {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Register => "reg_mr",
            Self::CreateCq => "create_cq",
            Self::CreateQp => "create_qp",
            Self::CreateSrq => "create_srq",
            Self::CreateWq => "create_wq",
            Self::DevxUmemReg => "devx_umem_reg",
        }
    }
}

/// A pin's purpose as its kernel record says it: the verb (None: no verb hook saw the thread
/// in one) and the doorbell-record flag.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct Purpose {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub verb: Option<Verb>,
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub doorbell: bool,
}

impl Purpose {
    /// From a record's `purpose` word.
    pub fn from_wire(word: u32) -> Self {
        let verb = match PinVerb::from_u32(word) {
            PinVerb::None => None,
            PinVerb::Register => Some(Verb::Register),
            PinVerb::Cq => Some(Verb::CreateCq),
            PinVerb::Qp => Some(Verb::CreateQp),
            PinVerb::Srq => Some(Verb::CreateSrq),
            PinVerb::Wq => Some(Verb::CreateWq),
            PinVerb::DevxUmem => Some(Verb::DevxUmemReg),
        };
        Self { verb, doorbell: is_doorbell(word) }
    }

    /// Nothing said: no verb, no doorbell.
    pub fn is_none(&self) -> bool {
        self.verb.is_none() && !self.doorbell
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use gdr_trace_common::queues::DOORBELL;

    #[test]
    fn verbs_are_named_as_users_know_them() {
        for v in [
            Verb::Register,
            Verb::CreateCq,
            Verb::CreateQp,
            Verb::CreateSrq,
            Verb::CreateWq,
            Verb::DevxUmemReg,
        ] {
            assert_eq!(serde_json::to_value(v).unwrap(), v.as_str());
        }
    }

    #[test]
    fn reads_the_verb_and_the_doorbell_flag() {
        assert!(Purpose::from_wire(0).is_none());
        assert_eq!(Purpose::from_wire(1).verb, Some(Verb::Register));
        let db = Purpose::from_wire(PinVerb::Qp as u32 | DOORBELL);
        assert_eq!((db.verb, db.doorbell), (Some(Verb::CreateQp), true));
        // A doorbell mapping seen outside any verb hook still says doorbell.
        assert_eq!(Purpose::from_wire(DOORBELL), Purpose { verb: None, doorbell: true });
        // An unknown verb number is no verb.
        assert_eq!(Purpose::from_wire(0x7f).verb, None);
    }
}
