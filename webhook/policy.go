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

// maxListed caps how many per-Lease problems, armed containers, unmet requirements and warnings
// a decision spells out.
const maxListed = 10

// The guard's per-review limits (README "limits"). Above them an armed object is refused with a
// message that says which limit it exceeds, never judged on a guess.
const (
	// DefaultMaxShards is the most shards one object may make the guard judge: a StatefulSet
	// whose pods take their shard from their ordinal has one shard per replica, and each costs a
	// Lease lookup and up to two access reviews.
	DefaultMaxShards = 128
	// DefaultMaxConfigMaps is the most distinct ConfigMaps one object's containers may read
	// their environment from (each is a GET while the API server waits).
	DefaultMaxConfigMaps = 32
)

// Policy holds the guard's switches (the chart exposes them as values).
type Policy struct {
	// RequireLiveLease turns on the order check: when a workload becomes armed, every shard it
	// will run must already have a live, held Lease with epoch >= 1.
	RequireLiveLease bool
	// MaxShards and MaxConfigMaps bound one review's work; 0 means the defaults.
	MaxShards     int
	MaxConfigMaps int
}

func (p Policy) maxShards() int {
	if p.MaxShards > 0 {
		return p.MaxShards
	}
	return DefaultMaxShards
}

func (p Policy) maxConfigMaps() int {
	if p.MaxConfigMaps > 0 {
		return p.MaxConfigMaps
	}
	return DefaultMaxConfigMaps
}

// Input is what is being admitted.
type Input struct {
	Operation admissionv1.Operation
	Object    *Workload
	// Old is the object before an UPDATE; nil on CREATE (or when the request carried none,
	// which makes an UPDATE count as a transition to armed: the stricter reading).
	Old *Workload
	// ConfigMapChange, when set, says the review is of a ConfigMap that Object reads: Object is
	// judged with the ConfigMap's new content, Old (the same workload) with its old content.
	ConfigMapChange *ConfigMapChange
	// Budget bounds the work of resolving environments; Evaluate sets one per review. nil gives
	// every call of Needs or Decide a fresh DefaultBudget.
	Budget *Budget
}

// ConfigMapChange is a ConfigMap being created or updated, as the workloads that read it will see it.
type ConfigMapChange struct {
	Name     string
	Old, New ConfigMapFact
}

func (in Input) budget() *Budget {
	if in.Budget != nil {
		return in.Budget
	}
	return NewBudget(0)
}

// configMapsFor overlays the change (new or old side) on a ConfigMapSource.
func (in Input) configMapsFor(cms ConfigMapSource, old bool) ConfigMapSource {
	c := in.ConfigMapChange
	if c == nil {
		return cms
	}
	return func(name string) (ConfigMapFact, bool) {
		if name == c.Name {
			if old {
				return c.Old, true
			}
			return c.New, true
		}
		return cms(name)
	}
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
	ReasonNoToken               Reason = "no_token"
	ReasonTooComplex            Reason = "too_complex"
	// ReasonInternalError is a recovered panic (a bug in the guard).
	ReasonInternalError Reason = "internal_error"
	// ReasonUnverifiedPod allows a Pod the guard could not verify because its own lookups
	// failed: Pods fail open (the chart's Ignore policy), so a guard outage never stops a
	// controller from recreating a crashed writer's Pod.
	ReasonUnverifiedPod Reason = "unverified_pod"
)

// AllowReasons lists every Reason an allowed decision can carry (for pinning metrics).
var AllowReasons = []Reason{ReasonUnarmed, ReasonRequirementsMet, ReasonNoOpinion, ReasonUnverifiedPod}

// DenialReasons lists every Reason a denial can carry (for pinning metrics).
var DenialReasons = []Reason{
	ReasonMalformed, ReasonElectionDisabled, ReasonElectionUnknowable, ReasonDefaultServiceAccount,
	ReasonServiceAccountMissing, ReasonServiceAccountUnbound, ReasonShardUnknown, ReasonLeaseNotLive,
	ReasonCouldNotVerify, ReasonNoToken, ReasonTooComplex, ReasonInternalError,
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
		fmt.Fprintf(&b, "; armed: %s", listed(d.Armed))
	}
	for i, u := range d.Unmet {
		if i == maxListed {
			fmt.Fprintf(&b, "\n... and %d more", len(d.Unmet)-maxListed)
			break
		}
		fmt.Fprintf(&b, "\n[%d] %s", i+1, u.Problem)
		if u.Fix != "" {
			fmt.Fprintf(&b, " Fix: %s", u.Fix)
		}
	}
	if len(d.Unknowable) > 0 {
		fmt.Fprintf(&b, "\nNote: %s count(s) as armed only because %s cannot be known; if it is not an ehdb writer meant to enforce, set %s explicitly in its env (for example to off): env overrides envFrom.",
			listed(d.Unknowable), EnvFencing, EnvFencing)
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

// view resolves every container of w against cms, spending from budget.
func view(w *Workload, cms ConfigMapSource, budget *Budget) []containerView {
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
		env := resolveEnv(c, &w.Pod, cms, budget)
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
	// tooMany is the replica count when the shards come from more ordinals than the guard
	// judges (Policy.MaxShards); shards is then empty.
	tooMany int32
}

// firstSet returns the first of names that is set the way election.ParseConfig sees it: a known
// value that is not blank, or an unknowable one (which might be anything).
func firstSet(lookup func(string) (Value, bool), names ...string) (string, Value, bool) {
	for _, n := range names {
		if v, ok := lookup(n); ok && (!v.Known() || strings.TrimSpace(v.Text) != "") {
			return n, v, true
		}
	}
	return "", Value{}, false
}

// judgeElection parses a container's environment with election.ParseConfig (the writer's own
// parser) and works out which Leases its pods will elect on. Only what the parser cannot see is
// decided here: which values are unknowable, and the HOSTNAME and per-ordinal fields each pod of
// a StatefulSet will have. At most maxShards ordinals are judged.
func judgeElection(w *Workload, env *Env, maxShards int) electionView {
	var ev electionView
	type looked struct {
		v  Value
		ok bool
	}
	memo := map[string]looked{}
	lookup := func(name string) (Value, bool) {
		if l, ok := memo[name]; ok {
			return l.v, l.ok
		}
		v, ok := env.Lookup(name)
		if v.PerOrdinal && name != election.EnvShard && name != "HOSTNAME" {
			// Only the shard is meant to vary by ordinal; anything else that does is not judged.
			v = Value{Unknown: &Unknown{Reasons: []string{name + " differs from pod to pod (it is made of the ordinal)"}}}
		}
		memo[name] = looked{v, ok}
		return v, ok
	}
	// getenv is the environment of the pod of the given ordinal (-1: per-ordinal values unset).
	getenv := func(ordinal int64, hostname string) func(string) (string, bool) {
		return func(name string) (string, bool) {
			v, ok := lookup(name)
			if name == "HOSTNAME" && !ok && hostname != "" {
				return hostname, true
			}
			if !ok || !v.Known() || (v.PerOrdinal && ordinal < 0) {
				return "", false
			}
			return v.At(ordinal), true
		}
	}
	cfg, problems := election.ParseConfig(getenv(-1, ""))
	ev.problems = problems
	_, ev.enabledText, ev.enabledSet = firstSet(lookup, election.EnvElection)
	ev.enabled = cfg.Enabled && ev.enabledSet && ev.enabledText.Known()

	// The Lease's namespace: NOETL_EHDB_ELECTION_NAMESPACE, else POD_NAMESPACE, else the
	// ServiceAccount namespace file, which is the pod's namespace.
	switch name, v, ok := firstSet(lookup, election.EnvNamespace, "POD_NAMESPACE"); {
	case !ok:
		ev.namespace = Value{Text: w.Namespace}
	case !v.Known():
		ev.namespace = Value{Unknown: &Unknown{Reasons: []string{name + ": " + v.Unknown.String()}}}
	default:
		ev.namespace = Value{Text: cfg.Namespace}
	}

	// The shard: NOETL_EHDB_ELECTION_SHARD, else the ordinal at the end of $HOSTNAME, which the
	// container may set itself and otherwise is the pod's hostname.
	name, v, ok := firstSet(lookup, election.EnvShard, "HOSTNAME")
	switch {
	case ok && !v.Known():
		ev.shardProblem = name + " cannot be known (" + v.Unknown.String() + ")"
		return ev
	case ok && !v.PerOrdinal:
		c, _ := election.ParseConfig(getenv(-1, ""))
		if c.HasShard {
			ev.shards = []uint32{c.Shard}
			return ev
		}
		ev.shardCertain = true
		ev.shardProblem = fmt.Sprintf("%s=%q gives the election no shard, so it would not run", name, v.Text)
		if msg := problemsAbout(problems, name); msg != "" {
			ev.shardProblem += " (" + msg + ")"
		}
		return ev
	case w.Kind != gvkStatefulSet.Kind:
		ev.shardProblem = fmt.Sprintf("the pods of a %s have no stable ordinal, so their shard cannot be told", w.Kind)
		return ev
	}
	// One shard per ordinal: from the pod's hostname, or from a per-ordinal field.
	if w.Replicas > 0 && int64(w.Replicas) > int64(maxShards) {
		ev.tooMany = w.Replicas
		return ev
	}
	for i := int64(0); i < int64(w.Replicas); i++ {
		ordinal := int64(w.OrdinalStart) + i
		host := statefulSetHostname(w, ordinal)
		c, ps := election.ParseConfig(getenv(ordinal, host))
		if !c.HasShard {
			ev.shardCertain = true
			if ok {
				ev.shardProblem = fmt.Sprintf("in the pod of ordinal %d, %s=%q gives the election no shard, so it would not run", ordinal, name, v.At(ordinal))
				if msg := problemsAbout(ps, name); msg != "" {
					ev.shardProblem += " (" + msg + ")"
				}
			} else {
				ev.shardProblem = fmt.Sprintf("the pod hostname %q gives the election no shard, so it would not run", host)
			}
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
// soon as something is known to be armed; access reviews for single Leases by name only once the
// namespace-wide review has refused. Call it until it returns an empty Query.
func Needs(in Input, f *Facts, p Policy) Query {
	w := in.Object
	if w == nil || w.Deleting || tooManyConfigMaps(w, p) > 0 {
		return Query{}
	}
	budget := in.budget()
	b := newQueryBuilder(f, w.Namespace)
	views := view(w, in.configMapsFor(f.configMaps(), false), budget)
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
				if in.ConfigMapChange == nil || name != in.ConfigMapChange.Name {
					b.configMap(name)
				}
			}
		}
	}
	if !anyArmed || budget.Exhausted() {
		return b.query()
	}
	wasArmed := false
	if in.Operation == admissionv1.Update && in.Old != nil {
		for _, ov := range view(in.Old, in.configMapsFor(f.configMaps(), true), budget) {
			if ov.armed && !ov.unknowable {
				wasArmed = true // armed before: not a transition
			}
			for _, name := range ov.pending {
				b.configMap(name)
			}
		}
		if wasArmed && in.ConfigMapChange != nil {
			return b.query() // the change arms nothing that was not armed: Decide has no opinion
		}
	}
	orderCheck := orderCheckApplies(in, p) && !wasArmed
	sa := ServiceAccountName(w.Pod.Spec)
	if sa != "default" {
		b.serviceAccount(sa)
	}
	saKey := types.NamespacedName{Namespace: w.Namespace, Name: sa}
	for i := range views {
		v := &views[i]
		if !v.armed || hasPendingConfigMaps(in, v.c, f) {
			continue
		}
		ev := judgeElection(w, v.env, p.maxShards())
		if !ev.namespace.Known() {
			continue
		}
		ns := ev.namespace.Text
		shardsKnown := ev.shardProblem == "" && ev.tooMany == 0
		if sa != "default" {
			for _, verb := range requiredVerbs {
				wide := AccessCheck{ServiceAccount: saKey, Namespace: ns, Verb: verb}
				b.access(wide)
				// A Role may grant get and update by resourceNames: ask for each shard's Lease
				// once the namespace-wide review has refused (create cannot be restricted by name).
				if a, ok := f.Access[wide]; ok && a.Err == nil && !a.Allowed && verb != "create" && shardsKnown {
					for _, s := range ev.shards {
						b.access(AccessCheck{ServiceAccount: saKey, Namespace: ns, Verb: verb, Name: election.LeaseName(s)})
					}
				}
			}
		}
		b.access(AccessCheck{ServiceAccount: types.NamespacedName{Namespace: w.Namespace, Name: "default"}, Namespace: ns, Verb: "update"})
		if orderCheck && shardsKnown {
			for _, s := range ev.shards {
				b.lease(types.NamespacedName{Namespace: ns, Name: election.LeaseName(s)})
			}
		}
	}
	return b.query()
}

func hasPendingConfigMaps(in Input, c *corev1.Container, f *Facts) bool {
	for _, name := range referencedConfigMaps(c) {
		if in.ConfigMapChange != nil && name == in.ConfigMapChange.Name {
			continue
		}
		if _, ok := f.ConfigMaps[name]; !ok {
			return true
		}
	}
	return false
}

// tooManyConfigMaps returns the number of distinct ConfigMaps w's containers read when it is
// above the policy's limit, else 0.
func tooManyConfigMaps(w *Workload, p Policy) int {
	seen := map[string]bool{}
	for _, c := range w.Containers() {
		for _, f := range c.EnvFrom {
			if f.ConfigMapRef != nil {
				seen[f.ConfigMapRef.Name] = true
			}
		}
		for i := range c.Env {
			if r := c.Env[i].ValueFrom; c.Env[i].Value == "" && r != nil && r.ConfigMapKeyRef != nil {
				seen[r.ConfigMapKeyRef.Name] = true
			}
		}
	}
	if len(seen) > p.maxConfigMaps() {
		return len(seen)
	}
	return 0
}

// orderCheckApplies reports whether the order check may run for in (before knowing whether the
// old object was armed). It never runs for a Pod or an object whose controller is a workload the
// guard judged (Workload.Exempt): those are created by a controller acting on an owner that was
// checked when it was armed, and a crashed writer's replacement must not wait for a Lease that
// only the replacement itself can renew.
func orderCheckApplies(in Input, p Policy) bool {
	if !p.RequireLiveLease || in.Object == nil || in.Object.Kind == gvkPod.Kind || in.Object.Exempt {
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
	if c := in.ConfigMapChange; c != nil {
		d.Subject = fmt.Sprintf("%s (through ConfigMap %s/%s, which it reads)", d.Subject, w.Namespace, c.Name)
	}
	if w.Deleting {
		// Finalizer removal on an object being deleted: nothing new can be armed by it, and
		// refusing would leave it stuck in deletion.
		d.Allowed, d.Reason = true, ReasonNoOpinion
		return d
	}
	where := "spec.template.spec"
	if w.Kind == gvkPod.Kind {
		where = "spec"
	} else if w.Kind == gvkCronJob.Kind {
		where = "spec.jobTemplate.spec.template.spec"
	}
	if n := tooManyConfigMaps(w, p); n > 0 {
		d.unmet(ReasonTooComplex,
			fmt.Sprintf("the containers read their environment from %d ConfigMaps; the guard reads at most %d per object, so it cannot tell whether %s is armed.", n, p.maxConfigMaps(), EnvFencing),
			fmt.Sprintf("read the environment from at most %d ConfigMaps (merge them), or keep the workload out of the guarded namespaces if it is not an ehdb writer.", p.maxConfigMaps()))
		d.Reason = ReasonTooComplex
		return d
	}
	budget := in.budget()
	cms := in.configMapsFor(f.configMapsFinal(), false)
	views := view(w, cms, budget)
	var armed []*containerView
	for i := range views {
		if views[i].armed {
			armed = append(armed, &views[i])
			if len(d.Armed) < maxListed {
				d.Armed = append(d.Armed, views[i].label()+": "+views[i].why)
			}
			if views[i].unknowable && len(d.Unknowable) < maxListed {
				d.Unknowable = append(d.Unknowable, views[i].label())
			}
		}
	}
	if budget.Exhausted() {
		d.unmet(ReasonTooComplex,
			fmt.Sprintf("the pod template's environment is too large or too intricate for the guard to resolve within its per-review work budget (%d steps), so it cannot tell whether %s is armed.", DefaultBudget, EnvFencing),
			"simplify the environment (fewer envFrom sources, fewer and shorter $(VAR) references).")
		d.Armed, d.Unknowable = nil, nil
		d.Reason = ReasonTooComplex
		return d
	}
	if len(armed) == 0 {
		d.Allowed, d.Reason = true, ReasonUnarmed
		return d
	}
	transition := orderCheckApplies(in, p) && !oldArmed(in, in.configMapsFor(f.configMapsFinal(), true), budget)
	if in.ConfigMapChange != nil && in.Operation == admissionv1.Update && oldArmed(in, in.configMapsFor(f.configMapsFinal(), true), budget) {
		// The ConfigMap change arms nothing that was not armed before.
		d.Allowed, d.Reason = true, ReasonNoOpinion
		return d
	}

	// 1. Election enabled, in the same container, by the writer's own parser.
	elections := make([]electionView, len(armed))
	for i, v := range armed {
		ev := judgeElection(w, v.env, p.maxShards())
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
		case ev.tooMany > 0:
			d.unmet(ReasonTooComplex,
				fmt.Sprintf("%s: the StatefulSet has %d replicas and each pod takes its shard from its ordinal; the guard judges at most %d shards per object, so it cannot verify this one.", v.label(), ev.tooMany, p.maxShards()),
				fmt.Sprintf("run at most %d replicas per StatefulSet, or set %s explicitly.", p.maxShards(), election.EnvShard))
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

	// 2. A dedicated ServiceAccount that exists, may use leases, and whose token the pod mounts.
	saName := ServiceAccountName(w.Pod.Spec)
	saKey := types.NamespacedName{Namespace: w.Namespace, Name: saName}
	var saFact *ServiceAccountFact
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
			saFact = &sa
			for _, a := range cloudIdentityAnnotations {
				if v, ok := sa.Annotations[a]; ok {
					d.warn(fmt.Sprintf("ServiceAccount %s carries the cloud identity %s=%s; a writer needs no cloud principal, use a dedicated ServiceAccount without one.", saKey, a, truncate(v, 60)))
				}
			}
		}
	}
	d.checkToken(w, where, saName, saFact, armed)
	namespaces := map[string][]uint32{}
	shardsKnown := map[string]bool{}
	for i, ev := range elections {
		if !ev.namespace.Known() {
			d.unmet(ReasonElectionUnknowable,
				fmt.Sprintf("%s: the election's namespace cannot be known (%s).", armed[i].label(), ev.namespace.Unknown.String()),
				fmt.Sprintf("set %s (or POD_NAMESPACE from fieldRef metadata.namespace) to a value the guard can read.", election.EnvNamespace))
			continue
		}
		ns := ev.namespace.Text
		if _, seen := shardsKnown[ns]; !seen {
			shardsKnown[ns] = true
		}
		if ev.shardProblem != "" || ev.tooMany > 0 {
			shardsKnown[ns] = false
		}
		namespaces[ns] = append(namespaces[ns], ev.shards...)
	}
	for _, ns := range sortedKeys(shardsKnown) {
		if saName != "default" {
			d.checkAccess(f, saKey, ns, namespaces[ns], shardsKnown[ns])
		}
		if a, ok := f.Access[AccessCheck{ServiceAccount: types.NamespacedName{Namespace: w.Namespace, Name: "default"}, Namespace: ns, Verb: "update"}]; ok && a.Err == nil && a.Allowed {
			d.warn(fmt.Sprintf("the default ServiceAccount of %s may update leases in %s: any pod there can overwrite a shard's Lease; bind the lease Role to the writer's ServiceAccount only.", w.Namespace, ns))
		}
	}

	// 3. The order check, on the transition to armed.
	if transition {
		for i, ev := range elections {
			if !ev.namespace.Known() || ev.tooMany > 0 || (ev.enabled && ev.shardCertain) {
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
	if w.Controller != "" && !w.Exempt && in.ConfigMapChange == nil {
		d.warn(truncate(fmt.Sprintf("controlled by %s, which the guard does not judge: this %s was judged itself, order check included.", w.Controller, w.Kind), 240))
	}
	// What stays open (README "limits"), said where it applies.
	if w.Exempt && p.RequireLiveLease && w.Kind != gvkPod.Kind {
		d.warn(truncate(fmt.Sprintf("order check skipped: the controller %s judged this template already; the guard does not verify that the owner exists.", w.Controller), 240))
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
	if w.Kind == gvkPod.Kind && d.onlyUnverified() {
		// Pods fail open when the guard itself cannot look (SPEC): admit, and say what went unchecked.
		for _, u := range d.Unmet {
			d.warn(truncate("ehdb-election guard could not verify this Pod and admits it (Pods fail open): "+u.Problem, 240))
		}
		d.Allowed, d.Reason, d.Unmet = true, ReasonUnverifiedPod, nil
	}
	return d
}

// onlyUnverified reports whether every unmet requirement is a failed lookup of the guard's own.
func (d *Decision) onlyUnverified() bool {
	for _, u := range d.Unmet {
		if u.Reason != ReasonCouldNotVerify {
			return false
		}
	}
	return true
}

// checkToken requires each armed container to be able to authenticate as the ServiceAccount: the
// pod mounts the ServiceAccount token (automountServiceAccountToken, from the pod, else from the
// ServiceAccount, default true), or the container mounts a projected serviceAccountToken volume.
func (d *Decision) checkToken(w *Workload, where, saName string, sa *ServiceAccountFact, armed []*containerView) {
	spec := w.Pod.Spec
	if spec == nil {
		return
	}
	automount, from := true, ""
	switch {
	case spec.AutomountServiceAccountToken != nil:
		automount, from = *spec.AutomountServiceAccountToken, where+".automountServiceAccountToken"
	case sa != nil && sa.AutomountToken != nil:
		automount, from = *sa.AutomountToken, "ServiceAccount "+quote(saName)+" automountServiceAccountToken"
	case sa == nil && saName != "default":
		return // the ServiceAccount could not be read: already reported
	}
	if automount {
		return
	}
	projected := map[string]bool{}
	for _, v := range spec.Volumes {
		if v.Projected == nil {
			continue
		}
		for _, src := range v.Projected.Sources {
			if src.ServiceAccountToken != nil {
				projected[v.Name] = true
			}
		}
	}
	for _, v := range armed {
		mounted := false
		for _, m := range v.c.VolumeMounts {
			if projected[m.Name] {
				mounted = true
				break
			}
		}
		if !mounted {
			d.unmet(ReasonNoToken,
				fmt.Sprintf("%s cannot authenticate to the API server: %s is false and it mounts no projected serviceAccountToken volume, so the election can neither read nor renew its Lease.", v.label(), from),
				fmt.Sprintf("remove automountServiceAccountToken: false (or set it to true in %s), or mount a projected volume with a serviceAccountToken source at /var/run/secrets/kubernetes.io/serviceaccount in %s.", where, v.label()))
		}
	}
}

// checkAccess requires the ServiceAccount to hold get, create and update on leases in ns:
// namespace-wide, or for get and update on each shard's Lease by name (a least-privilege Role's
// resourceNames). A review that failed, or refused with an evaluation error, is "could not verify".
func (d *Decision) checkAccess(f *Facts, sa types.NamespacedName, ns string, shards []uint32, shardsKnown bool) {
	var denied, failed []string
	var deniedNames []string
	for _, verb := range requiredVerbs {
		wide := AccessCheck{ServiceAccount: sa, Namespace: ns, Verb: verb}
		a, ok := f.Access[wide]
		switch {
		case !ok:
			failed = append(failed, verb+": "+errNotLookedUp.Error())
			continue
		case a.Err != nil:
			failed = append(failed, verb+": "+a.Err.Error())
			continue
		case a.Allowed:
			continue
		}
		if verb == "create" || !shardsKnown || len(shards) == 0 {
			if a.EvaluationError != "" {
				failed = append(failed, verb+": the authorizer could not decide ("+a.EvaluationError+")")
			} else {
				denied = append(denied, verb)
			}
			continue
		}
		var verbFailed, verbDenied bool
		for _, s := range shards {
			name := election.LeaseName(s)
			n, ok := f.Access[AccessCheck{ServiceAccount: sa, Namespace: ns, Verb: verb, Name: name}]
			switch {
			case !ok:
				failed, verbFailed = append(failed, verb+" "+name+": "+errNotLookedUp.Error()), true
			case n.Err != nil:
				failed, verbFailed = append(failed, verb+" "+name+": "+n.Err.Error()), true
			case n.Allowed:
			case n.EvaluationError != "":
				failed, verbFailed = append(failed, verb+" "+name+": the authorizer could not decide ("+n.EvaluationError+")"), true
			default:
				verbDenied = true
				deniedNames = appendNew(deniedNames, name)
			}
		}
		if verbDenied && !verbFailed {
			denied = append(denied, verb)
		}
	}
	if len(failed) > 0 {
		d.unmet(ReasonCouldNotVerify,
			fmt.Sprintf("could not verify that ServiceAccount %s may use leases in %s (%s).", sa, ns, listed(failed)),
			"retry; if it persists, check that the webhook may create SubjectAccessReviews and that the cluster's authorizers are healthy.")
	}
	if len(denied) > 0 {
		which := ""
		if len(deniedNames) > 0 {
			which = " (checked namespace-wide and for " + listed(deniedNames) + ")"
		}
		d.unmet(ReasonServiceAccountUnbound,
			fmt.Sprintf("ServiceAccount %s may not %s coordination.k8s.io leases in namespace %s%s.", sa, strings.Join(denied, ", "), ns, which),
			fmt.Sprintf("bind a Role granting get, list, watch, create, update on coordination.k8s.io leases in %s to ServiceAccount %s (the ehdb-election chart's Role ehdb-shard-election and its RoleBinding); get and update may be restricted by resourceNames to the shards' Leases, create may not.", ns, sa))
	}
}

// oldArmed reports whether the object was armed before this UPDATE. A missing old object counts
// as unarmed, so the order check runs; so does an old object armed only because its fencing value
// could not be known: nobody can say it was enforcing.
func oldArmed(in Input, cms ConfigMapSource, budget *Budget) bool {
	if in.Operation != admissionv1.Update || in.Old == nil {
		return false
	}
	for _, v := range view(in.Old, cms, budget) {
		if v.armed && !v.unknowable {
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
	if len(d.Warnings) < maxListed {
		d.Warnings = appendNew(d.Warnings, w)
	}
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
