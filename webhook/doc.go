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
//     ServiceAccount's real identity, so any correct binding passes and a missing one fails,
//     and that the lease guard of the Lease's namespace admits (leaseguard.go: read off the live
//     ValidatingAdmissionPolicy, which refuses every other account's Lease writes; a binding that
//     only warns counts too: it is Deny a value away, and no admission sees that change);
//   - each armed container must hold that ServiceAccount's token and the cluster's CA where
//     client-go's in-cluster configuration reads them, and dial the API server the kubelet names
//     (credentials.go), or its election talks to no API server, or to another one;
//   - every shard an object arms that it did not run armed before must already have a live,
//     held Lease with epoch >= 1 (the order check; Policy switch): workloads, and Pods that no
//     judged owner accounts for.
//
// The design follows controller-runtime's pkg/webhook/admission: Decide is a pure function of
// the object, the old object and Facts; a Resolver gathers the Facts (ConfigMaps, the
// ServiceAccount, SubjectAccessReviews, Leases) with concurrent lookups; Needs says which facts
// are still missing, so an unarmed object is decided without any API call; Handler is the thin
// transport that decodes, loops Needs/Resolve, decides, answers and records. One file answers one
// question: kinds.go which kinds make pods (one table), rbac.go what the RBAC authorizer grants,
// rbacchange.go what an RBAC change takes away, aggregation.go what the aggregation controller
// makes of a ClusterRole change, runs.go what the kubelet and the
// controllers make of a template, analysis.go which containers are armed, election.go what the
// writer's parser concludes, transition.go which shards the order check covers, owners.go when an
// owner exempts from it, credentials.go whether a container authenticates as its account to the
// checked API server, access.go, serviceaccount.go and lease.go the other requirements, decide.go
// and needs.go the judgement.
//
// The rules that close each class of issue 17 (README "What the guard refuses"):
//
//   - Kinds and paths (4). Every built-in path that creates a pod or changes a running pod's
//     containers is reviewed: the kinds of PodSources (ReplicationController included) on create
//     and update, Pods on create and on updates of their labels and annotations (a fieldRef to them
//     is resolved at every container start), through the Pod, its status or a binding that copies
//     them (binding.go), ephemeral containers added to a running Pod (judged
//     like a workload: order check, fail closed), and the scale subresource of the kinds with a
//     replica count. Arming that adds shards is arming: the order check covers every shard the
//     object runs armed that it did not run armed before (a StatefulSet's replicas 0 → n, a
//     scale-up). An object that runs no pods (Workload.NoPods: replicas 0, suspended, parallelism
//     0) runs no shard, so nothing is armed until it starts them, and starting them — scaled up
//     from 0, resumed — is the transition; as an owner it accounts for no child that runs pods
//     (unjudgedOwner). A paused Deployment runs only the ReplicaSets it has (its controller makes
//     none for its template), so a resume is judged against the shards they run (resume.go).
//     A Pod created armed is arming too unless a judged owner accounts for it (class 2): a
//     bare Pod, one controlled by a kind the guard does not judge, or by an owner that does not
//     have its armed containers, gets the order check (a host-network one, whose hostname names no
//     shard, is refused unless it sets its shard). An armed Pod whose own hostname gives its
//     election no shard is refused: its election would certainly decline.
//   - Ground truth (3). What the kubelet or a controller decides per pod is never read from the
//     template (runs.go): a pod on the host network has the node's hostname, so no shard follows
//     from its name; the StatefulSet controller's pod name, hostname, pod-name and pod-index
//     labels are computed per ordinal; a label or annotation a controller sets over the template
//     (an Indexed Job's completion index, pod-template-hash, controller-revision-hash) and the
//     hostname of controller-named pods are unknowable; an Indexed Job's containers get the
//     JOB_COMPLETION_INDEX variable its controller adds (and, with backoffLimitPerIndex, failure
//     counts it rewrites on each retry); the annotations the kubelet writes on the copy of a Pod
//     it runs (config.source "api", config.seen, config.mirror) are the kubelet's, whatever the
//     object says (kubeletAnnotation). Where a Pod carries its own truth (name, spec.hostname,
//     annotations) the Pod's review uses it. An unknowable shard is refused on every review the
//     order check covers, not only on the transition: an update or a ConfigMap edit that leaves
//     an armed object's shard unknowable (the host network, a key removed) is refused.
//   - What the election talks to (credentials.go). client-go's rest.InClusterConfig dials
//     KUBERNETES_SERVICE_HOST:KUBERNETES_SERVICE_PORT and reads the fixed files
//     /var/run/secrets/kubernetes.io/serviceaccount/{token,ca.crt} (the election, with no namespace
//     in its environment, also .../namespace). The kubelet sets the two variables from the
//     Service kubernetes of the default namespace, or from a Service of the pod's own namespace
//     whose service-link variables land on them (kubernetes, kubernetes-service's NAME_PORT) when
//     the pod keeps its service links: a Service whose links can set any variable the election
//     reads is refused in a guarded namespace, whatever its type (service.go).
//     An armed container is refused when its env or a
//     ConfigMap it reads sets either variable (empty, client-go is not in a cluster; any value, it
//     dials what the guard cannot tell is the checked API server; a Secret that may set it is
//     warned about), and when what is mounted at the token or CA path is not the ServiceAccount's
//     token for the API server's own audience and the ConfigMap kube-root-ca.crt. What is mounted
//     there is worked out as the container will run: for a template, with the mount the
//     ServiceAccount admission plugin adds (to init and regular containers without a mount at
//     exactly that path, of the pod's volume named kube-api-access-* if it has one, else its own);
//     for a Pod, its mounts as they are (the plugin and every mutating webhook ran before); an
//     ephemeral container gets none; the deepest mount covering the path wins (the container
//     runtime mounts parents first), with subPath followed, and two mounts at one path or a
//     subPathExpr are refused as undecidable. So an emptyDir (or any volume) over the directory, a
//     file mounted over the token, a projected token for another audience, automount off with the
//     token projected elsewhere, and a volume named like the plugin's are all refused. Each file
//     must also be readable as the process will find it: by every user (mode with 0444; no owner
//     the volume names, since the process's user is the image's), not a subPath copy (never
//     updated), with no mount at a ".." name inside its volume's mount (the kubelet's files are
//     symlinks through ..data); /run counts as /var/run, and a StatefulSet's claim template
//     replaces the template volume of its name (the controller's updateStorage).
//   - ConfigMap changes (1). Every create, update and delete of a ConfigMap in a guarded namespace
//     reaches the webhook (no matchCondition: a value may be assembled from several keys, or vanish
//     with a key or a delete), which judges each object that reads it (every kind of PodSources,
//     from a watch) as it will run after the change: arming is a transition (order check); an armed
//     reader must still meet every requirement, so turning its election off is refused with the
//     removal order (enforce → shadow first), and a shard or namespace it moves to faces the order
//     check. A bare Pod armed this way gets the order check too, each reader's owner verified as on
//     its own review; an edit that makes an armed reader dial another API server is refused like
//     the same value in its env; a reader whose controller reads the ConfigMap with the same
//     environment is judged through the controller (configmap.go). Out of reach: a new reader and
//     an edit of its ConfigMap judged at about the same instant, each before the other is in the
//     webhook's watch (admission is no transaction, and a watch trails the API server), are both
//     admitted; the writer's readiness (election.Readiness) stops that rollout at its first Pod.
//   - Owner exemptions (2). An owner exempts an object from the order check only when the webhook
//     fetched it (with the UID the object names) and its pod template, which the guard judged, is
//     semantically the object's, up to the labels the copy gains (a ReplicaSet's pod-template-hash;
//     a Job's job-name and controller-uid). Otherwise, or when the owner cannot be fetched, the
//     object is judged itself (owners.go); so is one whose owner was not judged for what it runs
//     (unjudgedOwner): an owner in deletion (its edits are admitted unjudged), one that runs no
//     pods while the object does (a finished Job too), a paused Deployment for a ReplicaSet
//     created under it. A ConfigMap or RBAC change is judged through a Pod's owner only for a Pod
//     as the owner's controller makes them (madeByOwner: its hostname fields and ordinal where the
//     owner's hostname is known, its account, the credentials its arming containers hold, and
//     every fieldRef and resourceFieldRef resolving as on the owner); any other Pod is judged
//     itself. A Pod's owner (StatefulSet, ReplicaSet, DaemonSet, Job,
//     ReplicationController) exempts it only when fetched with the UID named and every container of
//     the Pod that can set the fencing variable is the template's container of that name with the
//     same env and envFrom (the JOB_COMPLETION_INDEX an Indexed Job adds aside); sidecars that
//     cannot arm and the per-pod fields controllers and the ServiceAccount plugin set do not
//     count. Even so it accounts for the Pod only on the shards it runs (beyondOwner): every armed
//     container's shard, judged on the Pod, must be one its owner's container elects on, judged on
//     the owner. A Job is exempt under its CronJob only in the CronJob's completion mode. An owner
//     name no object can have is not found, for certain (its lookup would fail in the client). An
//     owner the webhook cannot fetch leaves the order check on, and its failure is "could not
//     verify": the Pod fails open, so a guard outage never stops a writer's Pod. So does a
//     StatefulSet's Pod below a rollout's partition made from the set's current revision
//     (revision.go): the guard judges templates, not revisions, and only that Pod can renew its
//     shard's Lease.
//   - Wrong refusals (5). A ConfigMap, or a key, that does not exist arms nothing now: no container
//     that needs it starts until it exists, and the create or update that brings it is a reviewed
//     ConfigMap change judged for every reader. A workload applied before its ConfigMap is admitted.
//     Limits count only what can arm: a ConfigMap change is judged for the readers it can move (a
//     changed key the guard reads for them, or the map appearing or going under a required
//     reference), and a container whose env fixes the fencing switch to a literal other than
//     enforce reads no ConfigMap for the guard (env overrides envFrom, the last entry winning).
//   - Scope (8). A review the webhook's watches cannot answer is "could not verify", never "read by
//     no one" or "owner trusted": ScopedReaders refuses a ConfigMap outside the watched namespaces,
//     an owner or a scaled StatefulSet the watches do not hold is unknown, and cmd/webhook compares
//     its configuration's namespaceSelector with --guarded-namespaces at start-up (a log line) and
//     in readiness (not ready on a mismatch). Leases outside the guarded namespaces
//     (Policy.LeaseNamespaces) are refused for what they are (lease_unguarded): the webhook can
//     never read them, and "could not verify" would let a Pod through.
//   - Disarming (6). An UPDATE or DELETE of a Role, RoleBinding, ClusterRole, ClusterRoleBinding or
//     ServiceAccount is refused when it turns an armed object that meets every requirement into one
//     that does not (rbacdecide.go): the webhook finds the accounts the change can touch (the removed
//     subjects of a binding whose role may grant a lease verb, the subjects of every binding of such
//     a role, the ServiceAccount itself), the armed objects that run as them (a watch index), and
//     judges each with the facts as the change leaves them (rbacchange.go): access is the
//     authorizer's answer now minus what the RBAC authorizer granted only through the changed object
//     (rbac.go follows plugin/pkg/auth/authorizer/rbac), a deleted ServiceAccount is missing, one
//     set to automountServiceAccountToken: false mounts no token. A ClusterRole change is also
//     judged by what the aggregation controller will rewrite because of it (aggregation.go): the
//     aggregated roles that select it, by labels, as they settle, so a piece cannot be deleted,
//     relabelled or narrowed out from under a writer, and a role given an aggregationRule (or
//     created with one) is judged by what it will select, whatever its own rules. The CA writers
//     verify the API server with, kube-root-ca.crt, is the root-ca-cert-publisher's alone while
//     anything there may be armed, and never made immutable, not even in the publisher's name
//     (rootca.go; Handler.RootCAPublishers names the identities it writes as). So RBAC no armed writer needs is
//     admitted (a redundant binding, a shadow writer, a role without lease verbs) whoever created it,
//     and the refusal gives the removal order. An UPDATE that removes the last finalizer of an
//     object in deletion deletes it (completesDeletion), so it is judged as that DELETE, for
//     ConfigMaps too. Bindings and roles are read fresh, never from a
//     cache; cached "allowed" answers are dropped on any RBAC or ServiceAccount change the watches
//     see (ForgetOnChange). A Role or RoleBinding can take access only in its own namespace, so
//     only that access is judged. A running process keeps the environment of its start
//     (started.go): an RBAC review judges a running container as armed when it read its fencing
//     switch from a ConfigMap that changed since (the API server's managedFields time against the
//     kubelet's startedAt, with a minute's margin; a container not reported running counts from
//     its Pod's creation, a Pod in graceful deletion until it stops), or from the Pod's labels or annotations, so a
//     ConfigMap set to shadow does not disarm a writer until it restarts; a ConfigMap change that
//     leaves no such record (a key removed, a delete, managedFields moved back) is refused while a
//     reader runs (unrecordedChange). Where the election runs is read at the start too: when its
//     on/off, namespace or shard may come from what changed since (electsElsewhere), the change
//     may take no lease access from the account anywhere it reaches (RBACChange.takenFrom), since
//     any Lease the account reaches may be the one the process holds. A review the webhook
//     cannot complete because its own ClusterRole no longer lets it list ClusterRoles (an older
//     chart's, part-way through a rollback) is admitted with a warning (olderRole); only a role
//     that lists neither ClusterRoles nor the lease guards is taken for an older chart's (0.1.0
//     granted neither), one narrowed of either alone is "could not verify" (olderChart). The guard's own access
//     is kept (rbacself.go): while it serves, a
//     change that unbinds its ServiceAccount, deletes the account, or takes from a role bound to it
//     the reads it verifies writers with is refused (guard_access). Out of reach: a grant by
//     another authorizer (only the RBAC grant is judged), any two changes judged at the same
//     instant, each without the other (two ConfigMap edits, two removals, an arming and an
//     unbinding: the webhook has no transaction and its replicas share no state), RBAC outside the guarded
//     namespaces, a ClusterRole(Binding) edit while the webhook is down (its entry fails open), and
//     `helm uninstall` of the webhook's own release (its pre-delete hook removes the webhook first).
//     The namespace controller's deletes never reach the webhook (the chart's matchConditions): it
//     deletes only in a namespace being deleted, its writers with it, and the chart's
//     ValidatingAdmissionPolicy refuses its name deleting anywhere else. A grant disarms as a
//     removal does when it gives an armed writer's account every verb on leases (the lease guard
//     refuses such an account): a role created or edited to grant "*" or the probe verb there, a
//     binding created or given subjects (addedSubjects), judged by what its role grants. Edits of a running Pod's
//     labels and annotations fail closed, unlike a Pod's creation and binding (decide.go): they
//     create nothing, and may disarm it.
//   - Liveness (9). With the Lease watch on, the order check judges a Lease live when the webhook's
//     watch saw it renew (its renewTime change, or its creation while watched) within its
//     leaseDurationSeconds on the webhook's own monotonic clock (JudgeRenewalsBy), so clock offsets
//     between nodes neither refuse a live election nor admit a dead one; a Lease not seen renewing
//     since the webhook started (or one read by GET, not yet in the watch) is not live: retry.
//   - Environment names (envnames.go). A name is judged as the node that runs the pod matches it:
//     exactly on a pod certain to run on Linux (spec.os.name: linux, or a kubernetes.io/os=linux
//     nodeSelector, which the kubelet refuses elsewhere; not that label, which can be added to a
//     running pod after the kubelet checked it), up to ASCII case otherwise,
//     since a Windows process reads noetl_ehdb_fencing as NOETL_EHDB_FENCING. Variants of one name
//     that differ, or an unreadable source that may set it in any case, make it unknowable; so an
//     undeclared pod that reads an envFrom Secret beside its election variables cannot be known:
//     declare spec.os.name: linux. A value is judged as the process sees it, up to its first NUL.
//
// Against an adversary: one review's work is bounded whatever the object says (Policy.MaxShards,
// MaxConfigMaps, a per-review Budget for resolving environments; above them a too_complex
// refusal), the transport charges request bodies as they arrive (never by Content-Length), hangs
// up on a client sending slower than 32 KiB/s and bounds the reviews judged at once (a quarter
// of them kept for the reviews the API server admits when unanswered: Pod creates, cluster RBAC;
// a review that fails closed and waits for a slot behind its own requester's share gives up its
// connection first), a review reads only the ConfigMap keys its containers can make matter
// within a per-review and per-process byte budget (one that would wait for it behind its own
// requester's quarter is refused at once, and a Pod so starved is refused, not failed open), the
// request's deadline is honoured, and a panic is recovered into an answer; cmd/webhook caps the
// connections open at once (above the API server's calls in flight), and at the cap a new one
// takes the place only of one provably not doing the API server's work (a read or write blocked
// on its client, silent 100 ms, still arriving after 1 s, idle 1 s; the waiting let in from a
// lobby, the client address holding the fewest places first), while the first 64 KiB of every body come from a
// reserve for every connection, so ordinary reviews do not wait for budget. No message quotes a value the guard
// read from a ConfigMap (Value.Read): without client certificates a review is answered to
// whoever sends it. An owner exempts an object from the order check only along the chains whose
// template the guard judged (PodSource.ExemptBy), and only if it exists (Owners). A ConfigMap
// whose content may arm a reader is judged as each reader (ConfigMapReaders, from a watch) would
// be armed by it.
//
// "Armed" needs the container's effective environment, which ResolveEnv builds exactly as the
// kubelet does. A value the guard cannot know (a Secret, a missing ConfigMap, a field decided at
// run time) counts as armed: the guard errs on the side of asking for the requirements. Out of its
// reach: ENV baked into the image, and pods made by controllers it does not know (custom resources);
// a writer that builds its client from its own configuration (a kubeconfig file or flag) rather
// than the in-cluster one (warned when an armed container passes --kubeconfig, ehdb-writer's flag); proxy variables (HTTPS_PROXY) on the way to the checked API server; static
// Pods (the kubelet runs them whatever admission says of their mirror Pod); and
// what a mutating webhook does to a workload's Pods, seen only when each Pod is reviewed (ours is
// a validating webhook, so it sees every Pod after all mutation: such a Pod is refused, and the
// rollout stops at it). Nor whoever may act as the writer's account (a namespace admin can mint its
// token or run a Pod as it, and then holds its Leases as the writer would: the lease guard admits
// an account, not a process) or administer the webhook's own namespace (its Deployment, Service
// and serving key): the README's trust row says how to keep those apart.
package webhook
