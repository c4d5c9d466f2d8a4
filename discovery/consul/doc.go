// Package consul is lbd's Consul source: it follows the Consul services that
// lbd's virtual services take their real servers from, and the services
// that carry lbd's virtual-service tag, and publishes complete snapshots of
// their instances.
//
// # Why not one long-poll per service
//
// The usual way to follow a Consul service is a blocking query on
// /v1/health/service/<name>: one long-poll, hence one HTTP connection, per
// service. The agent refuses more than limits.http_max_conns_per_client
// connections (default 200) from one client address, so that does not
// scale to hundreds of services. Instead, per datacenter, the Watcher holds
// two long-polls that serve as change triggers:
//
//   - /v1/catalog/services moves on every registration, deregistration and
//     change of a service instance, and lists each service's tags, which is
//     how services carrying the virtual-service tag are found;
//   - /v1/health/state/any moves on every health check change. Its answer
//     lists each check's node, service and status, so a change only
//     re-fetches the services (or the services on the nodes) whose checks
//     changed; output-only updates re-fetch nothing.
//
// When a trigger moves, the affected services are re-read with
// non-blocking /v1/health/service/<name> requests, at most
// Options.MaxConcurrency at a time; a full re-read also runs every
// Options.RefreshInterval. A trigger that fires while a refresh runs leads
// to exactly one more refresh after it. The Watcher therefore has at most
// MaxConcurrency + 2 per datacenter requests in flight, all on the Client's
// one keep-alive transport, whose connections are capped (see MaxConns).
//
// # Index handling
//
// Blocking queries follow Consul's guidance: the first read, and the read
// after an index went backwards (a restarted agent, a restored snapshot),
// is non-blocking; an answer whose index went backwards is discarded and
// the query starts over; an index of 0 is never used as a wait index; and
// every loop is rate-limited, so a misbehaving index cannot make it spin.
//
// A restarted Consul server elects itself leader and answers default
// reads before it has replayed its log: for a moment the catalog is empty
// at index 1, and believing it would drain every Consul-fed service. So
// the non-blocking reads (the triggers' first read after errors or a
// reset) and the service reads of a datacenter whose triggers have not
// both answered since are made in consistent mode, which Consul refuses
// ("Not ready to serve consistent reads") until its state has caught up.
// Once settled, reads go back to the cheaper default mode. A default
// service read that still meets such a server (sent just before it went
// away) answers with an index below the service's previous one: it is
// not believed, and the service is read again consistently.
//
// # Errors and ACLs
//
// On errors the Watcher keeps the last known instances, marks snapshots
// Connected=false with the error in Err, retries with jittered backoff
// (Options.MinRetry..MaxRetry) and logs once per change of state, not per
// retry. An answer that ACLs emptied is not "no instances": the last known
// instances stay and Err names the service. Consul only flags filtered
// answers (X-Consul-Results-Filtered-By-ACLs) for real tokens, not for the
// anonymous one, so an empty answer is also checked against the token's
// service:read permission before it is believed. An empty answer that
// Consul gave and the token was allowed to see is a real answer and is
// delivered: refusing suspicious mass deletions is the daemon's safety
// valve, not this package's.
//
// # Bounds
//
// Registrations are written by others, so what lbd reads from Consul is
// bounded: each answer (MaxAnswer, MaxChecksAnswer), the services carrying
// the virtual-service tag that are followed, and the values quoted in
// errors (Quote). A panic on an answer is recovered and the answer treated
// as unusable, so that one registration cannot crash-loop lbd.
package consul
