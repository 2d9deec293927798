// Package webhook is the admission guard of ehdb-election: it refuses to arm a writer's fence
// (NOETL_EHDB_FENCING=enforce) before the election that mints the fence's tokens can run.
//
// Arming the fence while nothing mints tokens does not degrade, it fails every writer at once, so
// the order "election live and minting first, enforce after" is enforced by the cluster itself:
//
//   - an armed container must enable the election in the same container, as judged by
//     election.ParseConfig, the writer's own parser (one definition of "enabled");
//   - the pod must run as a dedicated ServiceAccount (not "default") that exists and may get,
//     create and update coordination.k8s.io Leases, checked with SubjectAccessReviews for the
//     ServiceAccount's real identity, so any correct binding passes and a missing one fails;
//   - when a workload becomes armed (created armed, or updated from unarmed to armed), every
//     shard it will run must already have a live, held Lease with epoch >= 1 (Policy switch).
//
// The design follows controller-runtime's pkg/webhook/admission: Decide is a pure function of
// the object, the old object and Facts; a Resolver gathers the Facts (ConfigMaps, the
// ServiceAccount, SubjectAccessReviews, Leases) with concurrent lookups; Needs says which facts
// are still missing, so an unarmed object is decided without any API call; Handler is the thin
// transport that decodes, loops Needs/Resolve, decides, answers and records.
//
// Against an adversary: one review's work is bounded whatever the object says (Policy.MaxShards,
// MaxConfigMaps, a per-review Budget for resolving environments; above them a too_complex
// refusal), the transport charges request bodies as they arrive (never by Content-Length), hangs
// up on a client sending slower than 32 KiB/s and bounds the reviews judged at once, a review
// reads only the ConfigMap keys its containers can make matter within a per-review and
// per-process byte budget, the request's deadline is honoured, and a panic is recovered into an
// answer. An owner exempts an object from the order
// check only along the chains whose template the guard judged (Deployment→ReplicaSet,
// CronJob→Job, workload→Pod), and only if it exists (Owners). A ConfigMap whose content may arm
// a reader is judged as each reader (ConfigMapReaders, from a watch) would be armed by it.
//
// "Armed" needs the container's effective environment, which ResolveEnv builds exactly as the
// kubelet does. A value the guard cannot know (a Secret, a missing ConfigMap, a field decided at
// run time) counts as armed: the guard errs on the side of asking for the requirements.
package webhook
