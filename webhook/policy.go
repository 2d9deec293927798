package webhook

import (
	"fmt"
	"sort"
	"strconv"
	"strings"
	"time"

	admissionv1 "k8s.io/api/admission/v1"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/noetl/ehdb-election/election"
)

// EnvFencing is the variable that arms the fence. The guard's whole business is its value.
const EnvFencing = "NOETL_EHDB_FENCING"

// Lease verbs the election needs, and the one whose grant to the default ServiceAccount is
// worth a warning.
var requiredVerbs = []string{"get", "create", "update"}

// Cloud-identity annotations: a ServiceAccount carrying one is a cloud principal, and reusing it
// for the writer hands the writer that principal's cloud permissions.
var cloudIdentityAnnotations = []string{
	"iam.gke.io/gcp-service-account",
	"eks.amazonaws.com/role-arn",
	"azure.workload.identity/client-id",
}

// maxListed caps how many per-Lease problems a denial spells out.
const maxListed = 10

// Policy holds the guard's switches (the chart exposes them as values).
type Policy struct {
	// RequireLiveLease turns on the order check: when a workload becomes armed, every shard it
	// will run must already have a live, held Lease with epoch >= 1.
	RequireLiveLease bool
}

// Input is what is being admitted.
type Input struct {
	Operation admissionv1.Operation
	Object    *Workload
	// Old is the object before an UPDATE; nil on CREATE (or when the request carried none,
	// which makes an UPDATE count as a transition to armed: the stricter reading).
	Old *Workload
}

// Reason classifies a decision (the metrics label) and each unmet requirement.
type Reason string

// Reasons. Allowed decisions: Unarmed, RequirementsMet, NoOpinion. The rest name unmet
// requirements; a denial's Reason is its first unmet requirement's.
const (
	ReasonUnarmed               Reason = "unarmed"
	ReasonRequirementsMet       Reason = "requirements_met"
	ReasonNoOpinion             Reason = "no_opinion"
	ReasonMalformed             Reason = "malformed"
	ReasonElectionDisabled      Reason = "election_disabled"
	ReasonElectionUnknowable    Reason = "election_unknowable"
	ReasonDefaultServiceAccount Reason = "default_service_account"
	ReasonServiceAccountMissing Reason = "service_account_missing"
	ReasonServiceAccountUnbound Reason = "service_account_unbound"
	ReasonShardUnknown          Reason = "shard_unknown"
	ReasonLeaseNotLive          Reason = "lease_not_live"
	ReasonCouldNotVerify        Reason = "could_not_verify"
)

// DenialReasons lists every Reason a denial can carry (for pinning metrics).
var DenialReasons = []Reason{
	ReasonMalformed, ReasonElectionDisabled, ReasonElectionUnknowable, ReasonDefaultServiceAccount,
	ReasonServiceAccountMissing, ReasonServiceAccountUnbound, ReasonShardUnknown, ReasonLeaseNotLive,
	ReasonCouldNotVerify,
}

// Unmet is one requirement the object does not meet, and how to meet it.
type Unmet struct {
	Reason  Reason
	Problem string
	Fix     string
}

// Decision is the guard's answer.
type Decision struct {
	Allowed bool
	Reason  Reason
	// Armed names the armed containers and why each counts as armed.
	Armed    []string
	Unmet    []Unmet
	Warnings []string
	// Subject names the object for messages, e.g. "StatefulSet noetl/noetl-cmdbus-writer".
	Subject string
	// Unknowable names the containers that count as armed only because their fencing value
	// cannot be known (a Secret, a missing ConfigMap): the denial tells them how to opt out.
	Unknowable []string
}

// Message is the denial text the client sees: every unmet requirement with its fix.
func (d Decision) Message() string {
	if d.Allowed {
		return ""
	}
	var b strings.Builder
	fmt.Fprintf(&b, "refusing to arm %s=enforce on %s: %d requirement(s) unmet (election live and minting first, enforce after)", EnvFencing, d.Subject, len(d.Unmet))
	if len(d.Armed) > 0 {
		fmt.Fprintf(&b, "; armed: %s", strings.Join(d.Armed, "; "))
	}
	for i, u := range d.Unmet {
		fmt.Fprintf(&b, "\n[%d] %s", i+1, u.Problem)
		if u.Fix != "" {
			fmt.Fprintf(&b, " Fix: %s", u.Fix)
		}
	}
	if len(d.Unknowable) > 0 {
		fmt.Fprintf(&b, "\nNote: %s count(s) as armed only because %s cannot be known; if it is not an ehdb writer meant to enforce, set %s explicitly in its env (for example to off): env overrides envFrom.",
			strings.Join(d.Unknowable, ", "), EnvFencing, EnvFencing)
	}
	return b.String()
}

// containerView is one container judged against the facts at hand.
type containerView struct {
	c     *corev1.Container
	init  bool
	env   *Env
	armed bool
	// why says what makes it armed: the literal value, or why the value cannot be known.
	why string
	// pending lists ConfigMaps needed before armed can be decided.
	pending []string
	// unknowable is true when armed only because the value cannot be known.
	unknowable bool
}

func (v *containerView) label() string {
	if v.init {
		return "init container " + quote(v.c.Name)
	}
	return "container " + quote(v.c.Name)
}

// view resolves every container of w against cms.
func view(w *Workload, cms ConfigMapSource) []containerView {
	if w == nil {
		return nil
	}
	nInit := 0
	if w.Pod.Spec != nil {
		nInit = len(w.Pod.Spec.InitContainers)
	}
	cs := w.Containers()
	out := make([]containerView, len(cs))
	for i, c := range cs {
		env := ResolveEnv(c, &w.Pod, cms)
		cv := containerView{c: c, init: i < nInit, env: env}
		if v, ok := env.Lookup(EnvFencing); ok {
			switch {
			case v.Known():
				if strings.EqualFold(strings.TrimSpace(v.Text), "enforce") {
					cv.armed = true
					cv.why = fmt.Sprintf("%s=%q", EnvFencing, v.Text)
				}
			case len(v.Unknown.Pending) > 0:
				cv.pending = v.Unknown.Pending
			default:
				cv.armed, cv.unknowable = true, true
				cv.why = EnvFencing + " cannot be known (" + v.Unknown.String() + "), so it counts as enforce"
			}
		}
		out[i] = cv
	}
	return out
}

// referencedConfigMaps lists every ConfigMap a container's environment reads.
func referencedConfigMaps(c *corev1.Container) []string {
	var out []string
	for _, f := range c.EnvFrom {
		if f.ConfigMapRef != nil {
			out = appendNew(out, f.ConfigMapRef.Name)
		}
	}
	for _, e := range c.Env {
		if e.Value == "" && e.ValueFrom != nil && e.ValueFrom.ConfigMapKeyRef != nil {
			out = appendNew(out, e.ValueFrom.ConfigMapKeyRef.Name)
		}
	}
	return out
}

// electionView is what the shared election parser makes of an armed container's environment.
type electionView struct {
	enabledText  Value // NOETL_EHDB_ELECTION as resolved
	enabledSet   bool
	enabled      bool
	problems     []error
	namespace    Value // where the Lease lives
	shards       []uint32
	shardProblem string // why the shards cannot be told ("" when shards is complete)
	// shardCertain is true when shardProblem is certain to stop the election (it declines to
	// run without a shard), rather than only keeping the guard from telling the shard.
	shardCertain bool
}

// firstSet returns the first of names that is set the way election.ParseConfig sees it: a known
// value that is not blank, or an unknowable one (which might be anything).
func firstSet(env *Env, names ...string) (string, Value, bool) {
	for _, n := range names {
		if v, ok := env.Lookup(n); ok && (!v.Known() || strings.TrimSpace(v.Text) != "") {
			return n, v, true
		}
	}
	return "", Value{}, false
}

// judgeElection parses a container's environment with election.ParseConfig (the writer's own
// parser) and works out which Leases its pods will elect on. Only what the parser cannot see is
// decided here: which values are unknowable, and the HOSTNAME each pod will have.
func judgeElection(w *Workload, env *Env) electionView {
	var ev electionView
	parse := func(hostname string) (election.Config, []error) {
		return election.ParseConfig(func(name string) (string, bool) {
			v, ok := env.Lookup(name)
			if name == "HOSTNAME" && !ok && hostname != "" {
				return hostname, true
			}
			if !ok || !v.Known() {
				return "", false
			}
			return v.Text, true
		})
	}
	cfg, problems := parse("")
	ev.problems = problems
	_, ev.enabledText, ev.enabledSet = firstSet(env, election.EnvElection)
	ev.enabled = cfg.Enabled && ev.enabledSet && ev.enabledText.Known()

	// The Lease's namespace: NOETL_EHDB_ELECTION_NAMESPACE, else POD_NAMESPACE, else the
	// ServiceAccount namespace file, which is the pod's namespace.
	switch name, v, ok := firstSet(env, election.EnvNamespace, "POD_NAMESPACE"); {
	case !ok:
		ev.namespace = Value{Text: w.Namespace}
	case !v.Known():
		ev.namespace = Value{Unknown: &Unknown{Reasons: []string{name + ": " + v.Unknown.String()}}}
	default:
		ev.namespace = Value{Text: cfg.Namespace}
	}

	// The shard: NOETL_EHDB_ELECTION_SHARD, else the ordinal at the end of $HOSTNAME, which the
	// container may set itself and otherwise is the pod's hostname.
	if name, v, ok := firstSet(env, election.EnvShard, "HOSTNAME"); ok {
		switch {
		case !v.Known():
			ev.shardProblem = name + " cannot be known (" + v.Unknown.String() + ")"
		case cfg.HasShard:
			ev.shards = []uint32{cfg.Shard}
		default:
			ev.shardCertain = true
			ev.shardProblem = fmt.Sprintf("%s=%q gives the election no shard, so it would not run", name, v.Text)
			if msg := problemsAbout(problems, name); msg != "" {
				ev.shardProblem += " (" + msg + ")"
			}
		}
		return ev
	}
	if w.Kind != gvkStatefulSet.Kind {
		ev.shardProblem = fmt.Sprintf("the pods of a %s have no stable ordinal, so their shard cannot be told", w.Kind)
		return ev
	}
	for i := int64(0); i < int64(w.Replicas); i++ {
		host := statefulSetHostname(w, int64(w.OrdinalStart)+i)
		c, _ := parse(host)
		if !c.HasShard {
			ev.shardCertain = true
			ev.shardProblem = fmt.Sprintf("the pod hostname %q gives the election no shard, so it would not run", host)
			ev.shards = nil
			return ev
		}
		ev.shards = append(ev.shards, c.Shard)
	}
	return ev
}

// statefulSetHostname is $HOSTNAME in the pod of the given ordinal: the pod's name
// (<set>-<ordinal>, which the StatefulSet controller also sets as spec.hostname), the
// spec.hostnameOverride when the template sets one, or the FQDN when setHostnameAsFQDN is true.
func statefulSetHostname(w *Workload, ordinal int64) string {
	s := w.Pod.Spec
	if s != nil && s.HostnameOverride != nil && *s.HostnameOverride != "" {
		return *s.HostnameOverride
	}
	host := w.Name + "-" + strconv.FormatInt(ordinal, 10)
	if s != nil && s.SetHostnameAsFQDN != nil && *s.SetHostnameAsFQDN {
		// The cluster domain is the node's; any domain ends in a label, never in "-<digits>".
		host += "." + w.ServiceName + "." + w.Namespace + ".svc.cluster.local"
	}
	return host
}

// Needs returns the lookups Decide still lacks for in. It asks for nothing when nothing can be
// armed: an unarmed object is decided without a single API call. ConfigMaps come first (they
// decide whether anything is armed); ServiceAccount, access and Lease lookups are asked for as
// soon as something is known to be armed. Call it until it returns an empty Query.
func Needs(in Input, f *Facts, p Policy) Query {
	w := in.Object
	if w == nil || w.Deleting {
		return Query{}
	}
	b := newQueryBuilder(f, w.Namespace)
	views := view(w, f.configMaps())
	anyArmed := false
	for i := range views {
		v := &views[i]
		for _, name := range v.pending {
			b.configMap(name)
		}
		if v.armed {
			anyArmed = true
			// Everything the election reads may come from a ConfigMap.
			for _, name := range referencedConfigMaps(v.c) {
				b.configMap(name)
			}
		}
	}
	if !anyArmed {
		return b.query()
	}
	sa := ServiceAccountName(w.Pod.Spec)
	if sa != "default" {
		b.serviceAccount(sa)
	}
	orderCheck := orderCheckApplies(in, p)
	if orderCheck && in.Operation == admissionv1.Update && in.Old != nil {
		for _, ov := range view(in.Old, f.configMaps()) {
			if ov.armed {
				orderCheck = false // armed before: not a transition
			}
			for _, name := range ov.pending {
				b.configMap(name)
			}
		}
	}
	for i := range views {
		v := &views[i]
		if !v.armed || hasPendingConfigMaps(v.c, f) {
			continue
		}
		ev := judgeElection(w, v.env)
		if !ev.namespace.Known() {
			continue
		}
		ns := ev.namespace.Text
		if sa != "default" {
			for _, verb := range requiredVerbs {
				b.access(AccessCheck{ServiceAccount: types.NamespacedName{Namespace: w.Namespace, Name: sa}, Namespace: ns, Verb: verb})
			}
		}
		b.access(AccessCheck{ServiceAccount: types.NamespacedName{Namespace: w.Namespace, Name: "default"}, Namespace: ns, Verb: "update"})
		if orderCheck && ev.shardProblem == "" {
			for _, s := range ev.shards {
				b.lease(types.NamespacedName{Namespace: ns, Name: election.LeaseName(s)})
			}
		}
	}
	return b.query()
}

func hasPendingConfigMaps(c *corev1.Container, f *Facts) bool {
	for _, name := range referencedConfigMaps(c) {
		if _, ok := f.ConfigMaps[name]; !ok {
			return true
		}
	}
	return false
}

// orderCheckApplies reports whether the order check may run for in (before knowing whether the
// old object was armed). It never runs for a Pod or an object with a controller: those are
// created by a controller acting on an owner that was checked when it was armed, and a crashed
// writer's replacement must not wait for a Lease that only the replacement itself can renew.
func orderCheckApplies(in Input, p Policy) bool {
	if !p.RequireLiveLease || in.Object == nil || in.Object.Kind == gvkPod.Kind || in.Object.Controlled {
		return false
	}
	return in.Operation == admissionv1.Create || in.Operation == admissionv1.Update
}

// Decide is the guard's policy: a pure function of the object, the old object and the facts.
// A fact it needs but does not have counts as a failed lookup, so Decide never allows an armed
// object on missing information.
func Decide(in Input, f *Facts, p Policy) Decision {
	w := in.Object
	if w == nil {
		return Decision{Reason: ReasonMalformed, Unmet: []Unmet{{Reason: ReasonMalformed, Problem: "the request carries no object."}}}
	}
	d := Decision{Subject: fmt.Sprintf("%s %s/%s", w.Kind, w.Namespace, w.Name)}
	if w.Deleting {
		// Finalizer removal on an object being deleted: nothing new can be armed by it, and
		// refusing would leave it stuck in deletion.
		d.Allowed, d.Reason = true, ReasonNoOpinion
		return d
	}
	cms := f.configMapsFinal()
	views := view(w, cms)
	var armed []*containerView
	for i := range views {
		if views[i].armed {
			armed = append(armed, &views[i])
			d.Armed = append(d.Armed, views[i].label()+": "+views[i].why)
			if views[i].unknowable {
				d.Unknowable = append(d.Unknowable, views[i].label())
			}
		}
	}
	if len(armed) == 0 {
		d.Allowed, d.Reason = true, ReasonUnarmed
		return d
	}
	where := "spec.template.spec"
	if w.Kind == gvkPod.Kind {
		where = "spec"
	} else if w.Kind == gvkCronJob.Kind {
		where = "spec.jobTemplate.spec.template.spec"
	}

	// 1. Election enabled, in the same container, by the writer's own parser.
	elections := make([]electionView, len(armed))
	for i, v := range armed {
		ev := judgeElection(w, v.env)
		elections[i] = ev
		switch {
		case ev.enabledSet && !ev.enabledText.Known():
			d.unmet(ReasonElectionUnknowable,
				fmt.Sprintf("%s: %s cannot be known (%s), so election cannot be verified as enabled.", v.label(), election.EnvElection, ev.enabledText.Unknown.String()),
				fmt.Sprintf("set %s=true in the env of %s (or in a ConfigMap it reads).", election.EnvElection, v.label()))
		case !ev.enabled:
			detail := election.EnvElection + " is not set (election is off by default)"
			if ev.enabledSet {
				detail = fmt.Sprintf("%s=%q does not enable it", election.EnvElection, ev.enabledText.Text)
				if msg := problemsAbout(ev.problems, election.EnvElection); msg != "" {
					detail += " (" + msg + ")"
				}
			}
			d.unmet(ReasonElectionDisabled,
				fmt.Sprintf("%s: election is not enabled: %s.", v.label(), detail),
				fmt.Sprintf("set %s=true in the env of %s, the same container that sets %s.", election.EnvElection, v.label(), EnvFencing))
		case ev.shardProblem != "" && ev.shardCertain:
			d.unmet(ReasonShardUnknown,
				fmt.Sprintf("%s: %s.", v.label(), ev.shardProblem),
				fmt.Sprintf("set %s to the writer's shard number (decimal), or run it as a StatefulSet whose pod hostnames end in the ordinal.", election.EnvShard))
		default:
			for _, pr := range ev.problems {
				d.warn(fmt.Sprintf("%s: %v", v.label(), pr))
			}
		}
	}

	// 2. A dedicated ServiceAccount that exists and may use leases.
	saName := ServiceAccountName(w.Pod.Spec)
	saKey := types.NamespacedName{Namespace: w.Namespace, Name: saName}
	if saName == "default" {
		d.unmet(ReasonDefaultServiceAccount,
			fmt.Sprintf("the pod runs as the namespace's default ServiceAccount (%s.serviceAccountName is empty or \"default\"); every pod in %s that names no ServiceAccount would share the writer's lease rights.", where, w.Namespace),
			fmt.Sprintf("set %s.serviceAccountName to the writer's dedicated ServiceAccount (the ehdb-election chart creates noetl-cmdbus-writer) and bind the lease Role to it, never to default.", where))
	} else {
		switch sa, ok := f.ServiceAccounts[saName]; {
		case !ok:
			d.unmet(ReasonCouldNotVerify, fmt.Sprintf("could not verify ServiceAccount %s: %v.", saKey, errNotLookedUp), "retry; if it persists, check the webhook's access to the API server.")
		case sa.Err != nil:
			d.unmet(ReasonCouldNotVerify, fmt.Sprintf("could not verify ServiceAccount %s: %v.", saKey, sa.Err), "retry; if it persists, check the webhook's access to the API server.")
		case sa.NotFound:
			d.unmet(ReasonServiceAccountMissing,
				fmt.Sprintf("ServiceAccount %s does not exist.", saKey),
				fmt.Sprintf("create it (the ehdb-election chart does) or correct %s.serviceAccountName.", where))
		default:
			for _, a := range cloudIdentityAnnotations {
				if v, ok := sa.Annotations[a]; ok {
					d.warn(fmt.Sprintf("ServiceAccount %s carries the cloud identity %s=%s; a writer needs no cloud principal, use a dedicated ServiceAccount without one.", saKey, a, truncate(v, 60)))
				}
			}
		}
	}
	namespaces := map[string]bool{}
	for i, ev := range elections {
		if !ev.namespace.Known() {
			d.unmet(ReasonElectionUnknowable,
				fmt.Sprintf("%s: the election's namespace cannot be known (%s).", armed[i].label(), ev.namespace.Unknown.String()),
				fmt.Sprintf("set %s (or POD_NAMESPACE from fieldRef metadata.namespace) to a value the guard can read.", election.EnvNamespace))
			continue
		}
		namespaces[ev.namespace.Text] = true
	}
	for _, ns := range sortedKeys(namespaces) {
		if saName != "default" {
			var denied, failed []string
			for _, verb := range requiredVerbs {
				a, ok := f.Access[AccessCheck{ServiceAccount: saKey, Namespace: ns, Verb: verb}]
				switch {
				case !ok:
					failed = append(failed, verb+": "+errNotLookedUp.Error())
				case a.Err != nil:
					failed = append(failed, verb+": "+a.Err.Error())
				case !a.Allowed:
					denied = append(denied, verb)
				}
			}
			if len(failed) > 0 {
				d.unmet(ReasonCouldNotVerify,
					fmt.Sprintf("could not verify that ServiceAccount %s may use leases in %s (%s).", saKey, ns, strings.Join(failed, "; ")),
					"retry; if it persists, check that the webhook may create SubjectAccessReviews.")
			}
			if len(denied) > 0 {
				d.unmet(ReasonServiceAccountUnbound,
					fmt.Sprintf("ServiceAccount %s may not %s coordination.k8s.io leases in namespace %s.", saKey, strings.Join(denied, ", "), ns),
					fmt.Sprintf("bind a Role granting get, list, watch, create, update on coordination.k8s.io leases in %s to ServiceAccount %s (the ehdb-election chart's Role ehdb-shard-election and its RoleBinding).", ns, saKey))
			}
		}
		if a, ok := f.Access[AccessCheck{ServiceAccount: types.NamespacedName{Namespace: w.Namespace, Name: "default"}, Namespace: ns, Verb: "update"}]; ok && a.Err == nil && a.Allowed {
			d.warn(fmt.Sprintf("the default ServiceAccount of %s may update leases in %s: any pod there can overwrite a shard's Lease; bind the lease Role to the writer's ServiceAccount only.", w.Namespace, ns))
		}
	}

	// 3. The order check, on the transition to armed.
	if orderCheckApplies(in, p) && !oldArmed(in, cms) {
		for i, ev := range elections {
			if !ev.namespace.Known() || (ev.enabled && ev.shardCertain) {
				continue // already reported
			}
			if ev.shardProblem != "" {
				d.unmet(ReasonShardUnknown,
					fmt.Sprintf("%s: cannot tell which shard Leases to check: %s.", armed[i].label(), ev.shardProblem),
					fmt.Sprintf("set %s explicitly in %s, or run the writer as a StatefulSet.", election.EnvShard, armed[i].label()))
				continue
			}
			d.checkLeases(f, ev.namespace.Text, ev.shards)
		}
	}

	if len(d.Unmet) == 0 {
		d.Allowed, d.Reason = true, ReasonRequirementsMet
		for _, v := range armed {
			if !strings.HasPrefix(v.why, EnvFencing+"=") {
				d.warn(truncate(v.label()+": "+v.why, 240))
			}
		}
		return d
	}
	d.Reason = d.Unmet[0].Reason
	return d
}

// oldArmed reports whether the object was armed before this UPDATE. A missing old object counts
// as unarmed, so the order check runs.
func oldArmed(in Input, cms ConfigMapSource) bool {
	if in.Operation != admissionv1.Update || in.Old == nil {
		return false
	}
	for _, v := range view(in.Old, cms) {
		if v.armed {
			return true
		}
	}
	return false
}

// checkLeases requires each shard's Lease to be live by the SPEC rule (now <= renewTime +
// leaseDurationSeconds), held, and to carry an epoch (leaseTransitions) of at least 1.
func (d *Decision) checkLeases(f *Facts, ns string, shards []uint32) {
	type bad struct{ reason, text string }
	var problems []bad
	for _, s := range shards {
		key := types.NamespacedName{Namespace: ns, Name: election.LeaseName(s)}
		lf, ok := f.Leases[key]
		switch {
		case !ok:
			problems = append(problems, bad{"verify", fmt.Sprintf("could not verify Lease %s (shard %d): %v", key, s, errNotLookedUp)})
			continue
		case lf.Err != nil:
			problems = append(problems, bad{"verify", fmt.Sprintf("could not verify Lease %s (shard %d): %v", key, s, lf.Err)})
			continue
		case lf.NotFound:
			problems = append(problems, bad{"live", fmt.Sprintf("Lease %s (shard %d) does not exist: the election has not run for this shard", key, s)})
			continue
		}
		if why := leaseProblems(lf.Spec, f.Now); why != "" {
			problems = append(problems, bad{"live", fmt.Sprintf("Lease %s (shard %d) %s", key, s, why)})
		}
	}
	var verify, live []string
	for _, p := range problems {
		if p.reason == "verify" {
			verify = append(verify, p.text)
		} else {
			live = append(live, p.text)
		}
	}
	if len(verify) > 0 {
		d.unmet(ReasonCouldNotVerify, listed(verify)+".", "retry; if it persists, check that the webhook may get leases.")
	}
	if len(live) > 0 {
		d.unmet(ReasonLeaseNotLive, listed(live)+".",
			fmt.Sprintf("first deploy with %s=shadow (or off) and %s=true, wait until ehdb_election_token_valid is 1 on every writer, then set enforce.", EnvFencing, election.EnvElection))
	}
}

// leaseProblems says what keeps a Lease from proving a live election: "" when live, held and
// minted.
func leaseProblems(s coordinationv1.LeaseSpec, now time.Time) string {
	var why []string
	if s.HolderIdentity == nil || *s.HolderIdentity == "" {
		why = append(why, "is not held")
	}
	switch {
	case s.RenewTime == nil:
		why = append(why, "has never been renewed")
	case s.LeaseDurationSeconds == nil:
		why = append(why, "has no leaseDurationSeconds")
	default:
		expiry := s.RenewTime.Add(time.Duration(*s.LeaseDurationSeconds) * time.Second)
		if now.After(expiry) {
			why = append(why, fmt.Sprintf("expired at %s (renewTime + leaseDurationSeconds)", expiry.UTC().Format(time.RFC3339)))
		}
	}
	if s.LeaseTransitions == nil || *s.LeaseTransitions < 1 {
		why = append(why, "has epoch (leaseTransitions) 0: no fencing token has been minted")
	}
	return strings.Join(why, ", ")
}

func (d *Decision) unmet(r Reason, problem, fix string) {
	d.Unmet = append(d.Unmet, Unmet{Reason: r, Problem: problem, Fix: fix})
}

func (d *Decision) warn(w string) {
	d.Warnings = appendNew(d.Warnings, w)
}

// problemsAbout joins the parser's problems that mention name.
func problemsAbout(problems []error, name string) string {
	var out []string
	for _, p := range problems {
		if strings.Contains(p.Error(), name) {
			out = append(out, p.Error())
		}
	}
	return strings.Join(out, "; ")
}

func listed(items []string) string {
	if len(items) <= maxListed {
		return strings.Join(items, "; ")
	}
	return strings.Join(items[:maxListed], "; ") + "; and " + strconv.Itoa(len(items)-maxListed) + " more"
}

func sortedKeys(m map[string]bool) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

// truncate shortens s to at most n runes.
func truncate(s string, n int) string {
	r := []rune(s)
	if len(r) <= n {
		return s
	}
	return string(r[:n]) + "…"
}
