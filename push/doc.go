// Package push delivers the messages of PUSH subscriptions: the Dispatcher
// consumes the one shared push queue and POSTs each message to its
// subscription's URL. Its outcomes and dead letters are package delivery's
// model (whose API lists and replays them); its retries and deferrals go
// through package outbox.
//
// Delivery semantics:
//
//   - At least once. A message is acked on the broker only after its outcome
//     is stored: delivered (2xx), a retry scheduled, or a dead letter. A crash
//     before the ack makes the broker redeliver it: a duplicate, never a loss.
//     Receivers deduplicate with the webhook-id header (the event id).
//   - A retry is a fresh copy of the message, republished with
//     AMQ_SCHEDULED_DELAY from the subscription's retry policy and attempt
//     k+1, logged in published_messages before it is sent (so the outbox relay
//     sends it if this process dies first); only then is the original acked.
//     NACK is never used: Artemis discards on NACK, ActiveMQ Classic
//     dead-letters.
//   - Retried: connection errors, timeouts, 5xx, 408 and 429 (Retry-After,
//     seconds or HTTP date, raises the delay, bounded). Any other status
//     (including redirects, which are never followed) is permanent: the
//     message becomes a dead letter at once, as it does when attempts are
//     exhausted or it would expire before the next attempt. An expired
//     message is never delivered.
//   - A push URL that the SSRF guard (package netguard) refuses is a
//     permanent failure too, without a request: the guard checks each
//     address the host resolves to when dialing, and the URL itself
//     (https-only mode, literal addresses) before the request is sent.
//   - A TERMINATED or deleted subscription's messages are dropped (logged); a
//     PAUSED one's are held: republished with a growing delay, not counted as
//     attempts, until the subscription is ACTIVE again.
//   - One slow endpoint cannot hold the others back: each subscription has a
//     bound on concurrent requests; its messages beyond that wait in memory
//     while it is quick, but once one of its requests has run for SlowAfter
//     (250 ms) all but Backlog (64) of them are deferred, and so is every
//     new one, so that the prefetch window stays open for the other
//     subscriptions. A deferred message is acked once its copy is stored in
//     the outbox, parked (leased to outbox.ParkedOwner of its subscription)
//     for the deferral (1, 2, then 4 s; as long as the endpoint has been
//     hanging, if that is longer, up to 4 s); the outbox relay of any
//     process sends the copy when the lease ends (within
//     OUTBOX_POLL_INTERVAL), as the same attempt. Nothing is sent to the broker meanwhile: a deferral costs one
//     row in the group commit and an ack. Once the subscription answers
//     quickly again, the dispatcher ends its parked copies' leases at once.
//     From the fourth deferral in a row (8 s, doubling up to 1 min), and
//     from the first once the endpoint has hung for 30 s, the copy goes to
//     the broker's scheduler instead, for at least as long as the endpoint
//     has been hanging (up to 5 min), so that the outbox holds only a few
//     seconds' worth of a hanging endpoint's messages and a long hang does
//     not cycle its backlog through the dispatcher every minute.
//   - A circuit breaker per subscription stops a dead endpoint from using up
//     its messages' attempts. Each process counts the outcomes of its own
//     attempts (in memory: no database round trip per delivery); when at
//     least minimumAttempts of its last window attempts were made and
//     failureRate of them failed (retryable failures), or the endpoint
//     answers 410 Gone (then retried like a 5xx rather than dead-lettered),
//     it opens the circuit, which every process shares: a state, a version
//     and a probe time in the subscription's row, read with the subscription
//     (cached for CacheTTL) and changed only by an UPDATE over the version
//     it was changed from. While the circuit is open, the subscription's
//     messages are held like a PAUSED one's: republished, not attempted, not
//     counted, dead-lettered only if they expire; one per process comes back
//     when the probe is due, the others probeMargin (2 s) later; holds of up
//     to parkedDelay are parked in the outbox, longer ones go to the broker's
//     scheduler (at most 5 min). When the probe is due, the first message to
//     claim it (half-open) is sent; the others wait, parked, for its answer.
//     A probe that is answered closes the circuit and releases the parked
//     copies; one that fails is not an attempt of its message, which is held
//     again, and the next probe waits twice as long, up to maxCooldown.
//     Requests under way when the circuit opens complete as attempts, so a
//     dead endpoint gets at most minimumAttempts + PerSubscription − 1
//     requests per process before its circuit opens, then one per probe. A
//     reset (POST …/circuit:reset, a resumed subscription, a new push URL)
//     closes it with a new version, and each process forgets its count.
//   - A subscription's maxDeliveryRate paces its requests over every
//     process (GCRA): one database row holds the time of its next free
//     request slot, slots 1/rate apart; a process reserves slots with one
//     statement, a batch of 50 ms' worth at a time (at least one), only those
//     that begin within a second (or 64 slots). A message waits for its slot
//     without a worker or a scheduler slot, in memory; one whose turn is
//     further off is deferred (parked in the outbox or scheduled on the
//     broker, spread one slot apart), not attempted. A slot may be used up to
//     maxLate (100 ms) after it began, so at most rate × 1.1 + 1 requests
//     start in any second, whichever process sends them (clock differences
//     between hosts add to it). Retries and probes take slots too.
//   - A database outage is not a delivery failure: while the database does
//     not answer the dispatcher reads no message and starts no request (the
//     broker keeps them, unacked); a request already made keeps its outcome
//     until it can be stored, and is never repeated for it. Nothing is
//     attempted, counted or dead-lettered meanwhile.
//   - Each attempt sends the publish's W3C traceparent with a new parent id
//     (same trace id and flags) and its tracestate. With tracing on, that id
//     is the attempt's CLIENT span's, under the message's process span (see
//     tracing.go).
//   - A subscription's pushAuth credential goes with every attempt (retries
//     and replays are attempts); it cannot replace a header the service sets
//     (subscriptions.ReservedHeader). Whatever is recorded of an attempt (the
//     endpoint's answer, a transport error, so the delivery log and dead
//     letters) has the credential's secrets masked.
//   - A test event (Tester, POST …:test) is made as an attempt is, by the API
//     process that takes the request rather than through the push queue: it
//     is not stored, logged as a delivery or retried.
package push
