package manager

// ProtocolVersion is what this build reads of the ledger's log, as a manager
// advertises it to its datacenter (membership.Meta.Version): every command,
// the snapshot and the store in the ledger's one format,
// ledger.FormatVersion (docs/ledger.md, "Formats"). Versions 1 to 5 were
// advertised by builds before 1.0, whose logs this build does not read:
// autopilot adds no server that advertises less than its group
// (internal/autopilot), so a pre-1.0 manager never joins a 1.0 group, nor a
// 1.0 manager a later group that refuses it. A later format of the ledger
// bumps it.
const ProtocolVersion = 6
