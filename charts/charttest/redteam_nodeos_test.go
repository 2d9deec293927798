package charttest

import (
	"context"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	wt "github.com/noetl/ehdb-election/webhook/webhooktest"
)

// TestRedTeamTheNodesEnvironmentRules sends the environment-name class through the real API server,
// the chart's webhook configuration (its CEL matchConditions route by name up to case) and the
// webhook serving: a Windows process reads noetl_ehdb_fencing as NOETL_EHDB_FENCING, and any
// process reads a value only up to its first NUL. Before the rule, the lower-case Windows Pod never
// reached the webhook, and the NUL value was judged unarmed.
func TestRedTeamTheNodesEnvironmentRules(t *testing.T) {
	rt := newRedTeam(t)
	ctx := context.Background()
	cs := rt.cs
	rt.liveShard0(t)

	onOS := func(os corev1.OSName) func(*appsv1.StatefulSet) {
		return func(s *appsv1.StatefulSet) { s.Spec.Template.Spec.OS = &corev1.PodOS{Name: os} }
	}
	bare := func(name string, os corev1.OSName, env ...corev1.EnvVar) *corev1.Pod {
		p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name},
			Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "app", Image: "registry.invalid/app:1", Env: env}}}}
		if os != "" {
			p.Spec.OS = &corev1.PodOS{Name: os}
		}
		return p
	}
	lower := corev1.EnvVar{Name: "noetl_ehdb_fencing", Value: "enforce"}
	pods := cs.CoreV1().Pods(rt.ns)

	t.Run("armed in lower case on Windows, the default ServiceAccount", func(t *testing.T) {
		_, err := pods.Create(ctx, bare("win-0", corev1.Windows, lower), dryRunCreate)
		refused(t, "a Windows Pod with noetl_ehdb_fencing=enforce", err, "election is not enabled", "default ServiceAccount")
		_, err = pods.Create(ctx, bare("linux-0", corev1.Linux, lower), dryRunCreate)
		admitted(t, "the same Pod declared Linux (the name is another variable there)", err)
	})

	t.Run("armed in mixed case, the OS undeclared", func(t *testing.T) {
		d := &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Name: "mixed"}, Spec: appsv1.DeploymentSpec{
			Selector: selector, Template: podTemplate(container([]corev1.EnvVar{{Name: "Noetl_Ehdb_Fencing", Value: "ENFORCE"}}, nil))}}
		_, err := cs.AppsV1().Deployments(rt.ns).Create(ctx, d, dryRunCreate)
		refused(t, "a Deployment with Noetl_Ehdb_Fencing=ENFORCE, no OS", err, "refusing to arm", "election is not enabled")
	})

	t.Run("a value the process reads up to its NUL", func(t *testing.T) {
		_, err := pods.Create(ctx, bare("nul-0", corev1.Linux, corev1.EnvVar{Name: "NOETL_EHDB_FENCING", Value: "enforce\x00off"}), dryRunCreate)
		refused(t, `NOETL_EHDB_FENCING="enforce\x00off" on Linux`, err, "refusing to arm", "default ServiceAccount")
	})

	t.Run("the reference writer with an envFrom Secret", func(t *testing.T) {
		// Every variable the election reads is explicit, so on Linux the Secret (envFrom comes
		// first; env wins) can change none of them.
		secret := func(s *appsv1.StatefulSet) {
			s.Spec.Template.Spec.Containers[0].EnvFrom = fromSecret
			wt.SetEnv("NOETL_EHDB_ELECTION_NAMESPACE", rt.ns)(s)
			wt.SetEnv("NOETL_EHDB_ELECTION_SHARD", "0")(s) // else HOSTNAME may come from the Secret
		}
		_, err := cs.AppsV1().StatefulSets(rt.ns).Create(ctx, rt.writer("undeclared", secret), dryRunCreate)
		refused(t, "the OS undeclared: the Secret may set the election off in another case", err, "in another case", "spec.os.name: linux")
		_, err = cs.AppsV1().StatefulSets(rt.ns).Create(ctx, rt.writer("declared", secret, onOS(corev1.Linux)), dryRunCreate)
		admitted(t, "declared Linux: its explicit variables win over the Secret", err)
		_, err = cs.AppsV1().StatefulSets(rt.ns).Create(ctx, rt.writer("mixed-election", onOS(corev1.Windows),
			wt.SetEnv("noetl_ehdb_election", "false")), dryRunCreate)
		refused(t, "on Windows, NOETL_EHDB_ELECTION=true beside noetl_ehdb_election=false", err, "are set differently")
	})

	t.Run("an ephemeral container armed in lower case", func(t *testing.T) {
		p, err := pods.Create(ctx, bare("debug-win-0", corev1.Windows), metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		p.Spec.EphemeralContainers = []corev1.EphemeralContainer{{EphemeralContainerCommon: corev1.EphemeralContainerCommon{
			Name: "debug", Image: "registry.invalid/debug:1", Env: []corev1.EnvVar{lower}}}}
		_, err = pods.UpdateEphemeralContainers(ctx, p.Name, p, metav1.UpdateOptions{DryRun: []string{metav1.DryRunAll}})
		refused(t, "noetl_ehdb_fencing=enforce in an ephemeral container of a Windows Pod", err, `ephemeral container "debug"`, "election is not enabled")
	})
}
