//! Queue memory (the queue family; userspace: `gdr-trace/src/queues/`): the uverbs verbs and
//! driver functions inside which a NIC driver pins user memory (`verbs`), so that each pin says
//! whether it is a registration or a queue's ring, doorbell record or DEVX UMEM.

pub mod verbs;
