package webhook_test

import (
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"

	"github.com/noetl/ehdb-election/webhook"
	wt "github.com/noetl/ehdb-election/webhook/webhooktest"
)

// onOS sets the pod template's spec.os.name.
func onOS(name corev1.OSName) func(*appsv1.StatefulSet) {
	return func(s *appsv1.StatefulSet) { s.Spec.Template.Spec.OS = &corev1.PodOS{Name: name} }
}

// selectingLinux sets the template's nodeSelector kubernetes.io/os=linux.
func selectingLinux(s *appsv1.StatefulSet) {
	s.Spec.Template.Spec.NodeSelector = map[string]string{corev1.LabelOSStable: "linux"}
}

// labelledLinux sets the template's label kubernetes.io/os=linux.
func labelledLinux(s *appsv1.StatefulSet) { s.Spec.Template.Labels[corev1.LabelOSStable] = "linux" }

func secretEnvFrom(name string) corev1.EnvFromSource {
	return corev1.EnvFromSource{SecretRef: &corev1.SecretEnvSource{LocalObjectReference: corev1.LocalObjectReference{Name: name}}}
}

// The fifteenth red team: a Pod with spec.os.name: windows and noetl_ehdb_fencing=enforce in lower
// case, the default ServiceAccount and no election, was admitted without a webhook call. Windows
// matches environment names regardless of case, so its writer runs armed. The class is the node's
// rules for what a container's process sees of its environment: names folded unless the pod is
// certain to run on Linux, and a value seen up to its first NUL byte (envnames.go). Every row
// marked "was admitted" was admitted by the guard before the change.
func TestTheNodesEnvironmentRules(t *testing.T) {
	lowerArmed := []func(*appsv1.StatefulSet){unsetEnv(webhook.EnvFencing), wt.SetEnv("noetl_ehdb_fencing", "enforce")}
	unelected := func(opts ...func(*appsv1.StatefulSet)) []func(*appsv1.StatefulSet) {
		return append([]func(*appsv1.StatefulSet){unsetEnv("NOETL_EHDB_ELECTION"), wt.ServiceAccount("default")}, opts...)
	}
	offWith := func(opts ...func(*appsv1.StatefulSet)) []func(*appsv1.StatefulSet) {
		return unelected(append([]func(*appsv1.StatefulSet){wt.SetEnv(webhook.EnvFencing, "shadow")}, opts...)...)
	}
	refusedUnelected := []webhook.Reason{webhook.ReasonElectionDisabled, webhook.ReasonDefaultServiceAccount}
	rows := []row{
		// --- names in another case --------------------------------------------------------
		{name: "windows: lower-case enforce, no election, default account (was admitted)", sts: unelected(append(lowerArmed, onOS(corev1.Windows))...),
			unmet: refusedUnelected, lookups: -1},
		{name: "no spec.os: lower-case enforce counts (was admitted)", sts: unelected(lowerArmed...),
			unmet: refusedUnelected, lookups: -1},
		{name: "spec.os linux: lower-case enforce is another variable", sts: unelected(append(lowerArmed, onOS(corev1.Linux))...),
			allowed: true, reason: webhook.ReasonUnarmed, lookups: 0},
		{name: "nodeSelector kubernetes.io/os=linux: lower-case enforce is another variable", sts: unelected(append(lowerArmed, selectingLinux)...),
			allowed: true, reason: webhook.ReasonUnarmed, lookups: 0},
		// Team F: the kubelet checks the label only when it admits the pod, and a label can be
		// added to a running pod, so it proves nothing (TestAPodsLabelsAndAnnotationsAreJudged).
		{name: "label kubernetes.io/os=linux: lower-case enforce still counts (was admitted)", sts: unelected(append(lowerArmed, labelledLinux)...),
			unmet: refusedUnelected, lookups: -1},
		{name: "spec.os windows wins over a linux nodeSelector", sts: unelected(append(lowerArmed, selectingLinux, onOS(corev1.Windows))...),
			unmet: refusedUnelected, lookups: -1},
		{name: "windows: shadow and lower-case enforce side by side cannot be known (was admitted)", sts: offWith(wt.SetEnv("noetl_ehdb_fencing", "enforce"), onOS(corev1.Windows)),
			unmet: refusedUnelected, msg: []string{`"NOETL_EHDB_FENCING" and "noetl_ehdb_fencing" are set differently`, "set spec.os.name: linux"}, lookups: -1},
		{name: "windows: the same value in two cases is that value", sts: offWith(wt.SetEnv("noetl_ehdb_fencing", "shadow"), onOS(corev1.Windows)),
			allowed: true, reason: webhook.ReasonUnarmed, lookups: 0},
		{name: "windows: a lower-case election switch is the election's", sts: []func(*appsv1.StatefulSet){unsetEnv("NOETL_EHDB_ELECTION"), wt.SetEnv("noetl_ehdb_election", "true"), onOS(corev1.Windows)},
			allowed: true, reason: webhook.ReasonRequirementsMet, lookups: -1},
		{name: "windows: an election switched off in another case cannot be known (was admitted)", sts: []func(*appsv1.StatefulSet){wt.SetEnv("noetl_ehdb_election", "false"), onOS(corev1.Windows)},
			unmet: []webhook.Reason{webhook.ReasonElectionUnknowable}, msg: []string{`"NOETL_EHDB_ELECTION" and "noetl_ehdb_election"`}, lookups: -1},
		{name: "windows: a lower-case HOSTNAME beside the runtime's gives no shard (was admitted)", sts: []func(*appsv1.StatefulSet){wt.SetEnv("hostname", "writer-3"), onOS(corev1.Windows)},
			unmet: []webhook.Reason{webhook.ReasonShardUnknown}, msg: []string{`"hostname" and "HOSTNAME" (the runtime's)`}, lookups: -1},

		// --- sources that may set the name in any case ------------------------------------
		{name: "no spec.os: an envFrom Secret may set the switch in another case than the later shadow (was admitted)", sts: offWith(envFrom(secretEnvFrom("creds"))),
			unmet: []webhook.Reason{webhook.ReasonElectionUnknowable, webhook.ReasonDefaultServiceAccount, webhook.ReasonElectionUnknowable},
			msg:   []string{"may set NOETL_EHDB_FENCING in another case", "spec.os.name: linux"}, warn: []string{"KUBERNETES_SERVICE_HOST"}, lookups: -1},
		{name: "spec.os linux: a later shadow replaces what an envFrom Secret sets", sts: offWith(envFrom(secretEnvFrom("creds")), onOS(corev1.Linux)),
			allowed: true, reason: webhook.ReasonUnarmed, lookups: 0},
		{name: "no spec.os: a ConfigMap key in lower case arms (was admitted)", sts: unelected(unsetEnv(webhook.EnvFencing), envFrom(cmEnvFrom("flags", ""))),
			cluster: func(r *wt.Resolver) {
				r.ConfigMaps = map[string]map[string]string{"flags": {"noetl_ehdb_fencing": "enforce"}}
			},
			unmet: refusedUnelected, lookups: -1},
		{name: "no spec.os: a lower-case envFrom prefix leads to the switch (was admitted)", sts: unelected(unsetEnv(webhook.EnvFencing), envFrom(cmEnvFrom("flags", "noetl_ehdb_"))),
			cluster: func(r *wt.Resolver) { r.ConfigMaps = map[string]map[string]string{"flags": {"FENCING": "enforce"}} },
			unmet:   refusedUnelected, lookups: -1},
		{name: "spec.os linux: a ConfigMap key in lower case is another variable", sts: unelected(unsetEnv(webhook.EnvFencing), envFrom(cmEnvFrom("flags", "")), onOS(corev1.Linux)),
			cluster: func(r *wt.Resolver) {
				r.ConfigMaps = map[string]map[string]string{"flags": {"noetl_ehdb_fencing": "enforce"}}
			},
			allowed: true, reason: webhook.ReasonUnarmed, lookups: -1},

		// --- a value up to its NUL byte -----------------------------------------------------
		{name: "enforce, a NUL byte and more arms (was admitted)", sts: unelected(wt.SetEnv(webhook.EnvFencing, "enforce\x00shadow"), onOS(corev1.Linux)),
			unmet: refusedUnelected, lookups: -1},
		{name: "shadow, a NUL byte and enforce is shadow", sts: unelected(wt.SetEnv(webhook.EnvFencing, "shadow\x00enforce"), onOS(corev1.Linux)),
			allowed: true, reason: webhook.ReasonUnarmed, lookups: 0},
		{name: "an election switch true up to its NUL byte is on", sts: []func(*appsv1.StatefulSet){wt.SetEnv("NOETL_EHDB_ELECTION", "true\x00false"), onOS(corev1.Linux)},
			allowed: true, reason: webhook.ReasonRequirementsMet, lookups: -1},
	}
	for _, rw := range rows {
		t.Run(rw.name, func(t *testing.T) { runRow(t, rw) })
	}
}
