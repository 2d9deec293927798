package charttest

import (
	"bufio"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"sort"
	"strings"
	"testing"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/yaml"

	"github.com/noetl/ehdb-election/internal/chartinstall"
	"github.com/noetl/ehdb-election/webhook"
)

const testNS = "noetl"

// typed converts a rendered object into its API type, failing the test on unknown fields: a field
// the API type does not have is a template mistake the API server would silently drop or refuse.
func typed[T any](t *testing.T, o *unstructured.Unstructured) *T {
	t.Helper()
	if o == nil {
		t.Fatalf("object of type %T not rendered", *new(T))
	}
	out := new(T)
	if err := runtime.DefaultUnstructuredConverter.FromUnstructuredWithValidation(o.Object, out, true); err != nil {
		t.Fatalf("%s %s does not convert to %T: %v", o.GetKind(), o.GetName(), *out, err)
	}
	return out
}

func mustRender(t *testing.T, values map[string]any) *Rendered {
	t.Helper()
	r, err := Render(Name, testNS, values)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

func mustValuesFile(t *testing.T, rel string) map[string]any {
	t.Helper()
	v, err := ValuesFile(rel)
	if err != nil {
		t.Fatal(err)
	}
	return v
}

// scenarios are the default values plus every ci/*-values.yaml, as `helm lint` / chart-testing run them.
func scenarios(t *testing.T) map[string]map[string]any {
	t.Helper()
	files, err := CIValuesFiles()
	if err != nil {
		t.Fatal(err)
	}
	if len(files) < 5 {
		t.Fatalf("expected the ci/*-values.yaml scenarios, found %v", files)
	}
	out := map[string]map[string]any{"defaults": nil}
	for _, f := range files {
		out[f] = mustValuesFile(t, f)
	}
	return out
}

func TestLintAndRenderEveryScenario(t *testing.T) {
	standard := []string{"helm.sh/chart", "app.kubernetes.io/name", "app.kubernetes.io/instance",
		"app.kubernetes.io/version", "app.kubernetes.io/managed-by", "app.kubernetes.io/part-of", "app.kubernetes.io/component"}
	clusterScoped := map[string]bool{"ClusterRole": true, "ClusterRoleBinding": true, "ValidatingWebhookConfiguration": true,
		"ValidatingAdmissionPolicy": true, "ValidatingAdmissionPolicyBinding": true}
	for name, values := range scenarios(t) {
		t.Run(name, func(t *testing.T) {
			msgs, err := Lint(testNS, values)
			if err != nil {
				t.Fatal(err)
			}
			if len(msgs) > 0 {
				t.Fatalf("helm lint --strict:\n%s", strings.Join(msgs, "\n"))
			}
			r := mustRender(t, values)
			if len(r.Objects) == 0 {
				t.Fatal("nothing rendered")
			}
			seen := map[string]bool{}
			for _, o := range append(slices.Clone(r.Objects), r.Hooks...) {
				id := o.GetKind() + "/" + o.GetName()
				for _, l := range standard {
					if o.GetLabels()[l] == "" {
						t.Errorf("%s lacks label %s", id, l)
					}
				}
				if clusterScoped[o.GetKind()] {
					if o.GetNamespace() != "" {
						t.Errorf("cluster-scoped %s has namespace %q", id, o.GetNamespace())
					}
				} else if o.GetNamespace() != testNS {
					t.Errorf("%s is in namespace %q, want the release namespace %q", id, o.GetNamespace(), testNS)
				}
				if o.GetAnnotations()["helm.sh/hook"] == "" {
					if seen[id] {
						t.Errorf("%s rendered twice", id)
					}
					seen[id] = true
				}
			}
		})
	}
}

// TestDefaultsRenderTheSpecifiedObjects pins the default install's object list: a change here is a
// change to what `helm install ehdb-election charts/ehdb-election -n noetl` creates.
func TestDefaultsRenderTheSpecifiedObjects(t *testing.T) {
	r := mustRender(t, nil)
	var got []string
	for _, o := range r.Objects {
		got = append(got, o.GetKind()+"/"+o.GetName())
	}
	sort.Strings(got)
	want := []string{
		"ClusterRole/ehdb-election-lease-viewer.noetl",
		"ClusterRole/ehdb-election-webhook",
		"ClusterRoleBinding/ehdb-election-webhook",
		"Deployment/ehdb-election-webhook",
		"PodDisruptionBudget/ehdb-election-webhook",
		"Role/ehdb-election-webhook",
		"Role/ehdb-election-webhook-guard",
		"Role/ehdb-shard-election",
		"RoleBinding/ehdb-election-webhook",
		"RoleBinding/ehdb-election-webhook-guard",
		"RoleBinding/ehdb-shard-election",
		"Secret/ehdb-election-webhook-tls",
		"Service/ehdb-election-webhook",
		"ServiceAccount/ehdb-election-webhook",
		"ServiceAccount/noetl-cmdbus-writer",
		"ValidatingAdmissionPolicy/ehdb-election-lease-guard.noetl",
		"ValidatingAdmissionPolicy/ehdb-election-namespace-deletes.noetl",
		"ValidatingAdmissionPolicyBinding/ehdb-election-lease-guard.noetl",
		"ValidatingAdmissionPolicyBinding/ehdb-election-namespace-deletes.noetl",
		"ValidatingWebhookConfiguration/ehdb-election",
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("default objects:\n got %v\nwant %v", got, want)
	}
}

func TestWriterRBAC(t *testing.T) {
	cases := []struct {
		name      string
		values    map[string]any
		saName    string
		createsSA bool
	}{
		{"defaults", nil, "noetl-cmdbus-writer", true},
		{"existing account", mustValuesFile(t, "ci/existing-serviceaccount-values.yaml"), "cmdbus-writer", false},
		{"renamed account", map[string]any{"writer": map[string]any{"serviceAccount": map[string]any{"name": "shard-writer"}}}, "shard-writer", true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			r := mustRender(t, tc.values)

			role := typed[rbacv1.Role](t, r.Find("Role", "ehdb-shard-election"))
			wantRules := []rbacv1.PolicyRule{{
				APIGroups: []string{"coordination.k8s.io"},
				Resources: []string{"leases"},
				Verbs:     []string{"get", "list", "watch", "create", "update", "ehdb-elect"},
			}}
			if !reflect.DeepEqual(role.Rules, wantRules) {
				t.Errorf("Role ehdb-shard-election rules = %+v, want exactly %+v", role.Rules, wantRules)
			}

			rb := typed[rbacv1.RoleBinding](t, r.Find("RoleBinding", "ehdb-shard-election"))
			wantSubjects := []rbacv1.Subject{{Kind: "ServiceAccount", Name: tc.saName, Namespace: testNS}}
			if !reflect.DeepEqual(rb.Subjects, wantSubjects) {
				t.Errorf("RoleBinding subjects = %+v, want exactly %+v", rb.Subjects, wantSubjects)
			}
			if want := (rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "Role", Name: "ehdb-shard-election"}); rb.RoleRef != want {
				t.Errorf("RoleBinding roleRef = %+v, want %+v", rb.RoleRef, want)
			}

			sa := r.Find("ServiceAccount", tc.saName)
			if tc.createsSA != (sa != nil) {
				t.Fatalf("ServiceAccount %s rendered = %v, want %v", tc.saName, sa != nil, tc.createsSA)
			}
			// Only the keep policies (Helm's, Argo CD's, Flux's; see safety_test.go and gitops_test.go):
			// no cloud identity unless asked.
			if sa != nil && !reflect.DeepEqual(sa.GetAnnotations(), map[string]string{"helm.sh/resource-policy": "keep",
				argoSyncOptions: "Prune=false,Delete=false", fluxPrune: "disabled"}) {
				t.Errorf("writer ServiceAccount carries annotations by default: %v (no cloud identity unless asked)", sa.GetAnnotations())
			}
		})
	}
}

func TestWebhookRBACIsExactlyTheContract(t *testing.T) {
	sar := []rbacv1.PolicyRule{
		{APIGroups: []string{"authorization.k8s.io"}, Resources: []string{"subjectaccessreviews"}, Verbs: []string{"create"}},
		// RBAC changes under review: what may grant a writer its Leases (issue 17).
		{APIGroups: []string{"rbac.authorization.k8s.io"}, Resources: []string{"clusterroles", "clusterrolebindings"}, Verbs: []string{"get", "list", "watch"}},
		// The lease guards, whose admitted accounts an armed writer's must be among.
		{APIGroups: []string{"admissionregistration.k8s.io"}, Resources: []string{"validatingadmissionpolicies", "validatingadmissionpolicybindings"}, Verbs: []string{"list"}},
	}
	// What the guard reads, only where it guards (cluster-wide only with guardedNamespaces ["*"]).
	reads := []rbacv1.PolicyRule{
		{APIGroups: []string{""}, Resources: []string{"configmaps"}, Verbs: []string{"get"}},
		{APIGroups: []string{""}, Resources: []string{"serviceaccounts"}, Verbs: []string{"get", "list", "watch"}},
		{APIGroups: []string{"rbac.authorization.k8s.io"}, Resources: []string{"roles", "rolebindings"}, Verbs: []string{"get", "list", "watch"}},
		{APIGroups: []string{""}, Resources: []string{"replicationcontrollers", "pods"}, Verbs: []string{"get", "list", "watch"}},
		{APIGroups: []string{"coordination.k8s.io"}, Resources: []string{"leases"}, Verbs: []string{"get", "list", "watch"}},
		{APIGroups: []string{"apps"}, Resources: []string{"statefulsets", "deployments", "daemonsets", "replicasets"}, Verbs: []string{"get", "list", "watch"}},
		{APIGroups: []string{"batch"}, Resources: []string{"cronjobs", "jobs"}, Verbs: []string{"get", "list", "watch"}},
		// The revision a StatefulSet makes its pods below a rollout's partition from, by name.
		{APIGroups: []string{"apps"}, Resources: []string{"controllerrevisions"}, Verbs: []string{"get"}},
	}
	tlsVerbs := []string{"get", "list", "watch", "update", "patch"}
	vwcRule := rbacv1.PolicyRule{APIGroups: []string{"admissionregistration.k8s.io"},
		Resources: []string{"validatingwebhookconfigurations"}, ResourceNames: []string{"ehdb-election"}, Verbs: tlsVerbs}
	secretRole := []rbacv1.PolicyRule{{APIGroups: []string{""}, Resources: []string{"secrets"},
		ResourceNames: []string{"ehdb-election-webhook-tls"}, Verbs: tlsVerbs}}
	cases := []struct {
		name        string
		values      map[string]any
		clusterWant []rbacv1.PolicyRule
		roleWant    []rbacv1.PolicyRule // nil: no namespaced Role for the webhook's Secret
		guardRoles  []string            // namespaces with the guard's read Role
	}{
		{name: "self-managed TLS", clusterWant: append(slices.Clone(sar), vwcRule), roleWant: secretRole, guardRoles: []string{testNS}},
		{name: "cert-manager TLS needs no Secret or webhook configuration access", values: mustValuesFile(t, "ci/certmanager-values.yaml"),
			clusterWant: sar, guardRoles: []string{testNS}},
		{name: "more writer namespaces", values: map[string]any{"webhook": map[string]any{"guardedNamespaces": []any{"team-a", testNS}}},
			clusterWant: append(slices.Clone(sar), vwcRule), roleWant: secretRole, guardRoles: []string{testNS, "team-a"}},
		{name: "every namespace: cluster-wide reads", values: map[string]any{"webhook": map[string]any{"guardedNamespaces": []any{"*"}}},
			clusterWant: append(append(slices.Clone(sar), reads...), vwcRule), roleWant: secretRole},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			r := mustRender(t, tc.values)
			cr := typed[rbacv1.ClusterRole](t, r.Find("ClusterRole", "ehdb-election-webhook"))
			if !reflect.DeepEqual(cr.Rules, tc.clusterWant) {
				t.Errorf("ClusterRole rules:\n got %+v\nwant %+v", cr.Rules, tc.clusterWant)
			}
			crb := typed[rbacv1.ClusterRoleBinding](t, r.Find("ClusterRoleBinding", "ehdb-election-webhook"))
			if want := []rbacv1.Subject{{Kind: "ServiceAccount", Name: "ehdb-election-webhook", Namespace: testNS}}; !reflect.DeepEqual(crb.Subjects, want) {
				t.Errorf("ClusterRoleBinding subjects = %+v, want %+v", crb.Subjects, want)
			}
			var guardNS []string
			for _, o := range r.OfKind("Role") {
				if o.GetName() != "ehdb-election-webhook-guard" {
					continue
				}
				guardNS = append(guardNS, o.GetNamespace())
				if got := typed[rbacv1.Role](t, o).Rules; !reflect.DeepEqual(got, reads) {
					t.Errorf("guard Role in %s:\n got %+v\nwant %+v", o.GetNamespace(), got, reads)
				}
			}
			if !slices.Equal(guardNS, tc.guardRoles) {
				t.Errorf("guard Roles in %v, want %v", guardNS, tc.guardRoles)
			}
			var boundNS []string
			for _, o := range r.OfKind("RoleBinding") {
				if o.GetName() == "ehdb-election-webhook-guard" {
					boundNS = append(boundNS, o.GetNamespace())
				}
			}
			if !slices.Equal(boundNS, tc.guardRoles) {
				t.Errorf("guard RoleBindings in %v, want %v", boundNS, tc.guardRoles)
			}
			role := r.Find("Role", "ehdb-election-webhook")
			if tc.roleWant == nil {
				if role != nil || r.Find("RoleBinding", "ehdb-election-webhook") != nil {
					t.Errorf("webhook Role/RoleBinding rendered where no Secret access is needed")
				}
				return
			}
			if got := typed[rbacv1.Role](t, role).Rules; !reflect.DeepEqual(got, tc.roleWant) {
				t.Errorf("webhook Role rules:\n got %+v\nwant %+v", got, tc.roleWant)
			}
		})
	}
}

// TestSchemaRefuses: every value is validated before anything renders. Each case also names the
// path, so the message points the operator at the value to fix.
func TestSchemaRefuses(t *testing.T) {
	sa := func(name any) map[string]any {
		return map[string]any{"writer": map[string]any{"serviceAccount": map[string]any{"name": name}}}
	}
	wh := func(k string, v any) map[string]any { return map[string]any{"webhook": map[string]any{k: v}} }
	cases := []struct {
		name   string
		values map[string]any
		path   string
	}{
		{"writer SA empty", sa(""), "/writer/serviceAccount/name"},
		{"writer SA not a DNS name", sa("Noetl_Writer"), "/writer/serviceAccount/name"},
		{"writer SA not a string", sa(7), "/writer/serviceAccount/name"},
		{"workloads failurePolicy", wh("failurePolicy", map[string]any{"workloads": "Closed"}), "/webhook/failurePolicy/workloads"},
		{"pods failurePolicy", wh("failurePolicy", map[string]any{"pods": "fail"}), "/webhook/failurePolicy/pods"},
		{"timeoutSeconds 0", wh("timeoutSeconds", 0), "/webhook/timeoutSeconds"},
		{"timeoutSeconds 31", wh("timeoutSeconds", 31), "/webhook/timeoutSeconds"},
		{"timeoutSeconds string", wh("timeoutSeconds", "5"), "/webhook/timeoutSeconds"},
		{"replicaCount 0", wh("replicaCount", 0), "/webhook/replicaCount"},
		{"logLevel", wh("logLevel", "trace"), "/webhook/logLevel"},
		{"pullPolicy", wh("image", map[string]any{"pullPolicy": "Sometimes"}), "/webhook/image/pullPolicy"},
		{"excluded namespace not a name", wh("excludeNamespaces", []any{"Kube_System"}), "/webhook/excludeNamespaces/0"},
		{"guarded namespace not a name", wh("guardedNamespaces", []any{"Team_A"}), "/webhook/guardedNamespaces/0"},
		{"unknown top-level key", map[string]any{"replicas": 3}, "'replicas' not allowed"},
		{"unknown nested key", wh("failurepolicy", "Fail"), "'failurepolicy' not allowed"},
		{"unknown key in a k8s-shaped value", wh("securityContext", map[string]any{"readOnlyRootFileSystem": true}), "'readOnlyRootFileSystem' not allowed"},
		{"lease guard Deny with Warn", map[string]any{"leaseGuard": map[string]any{"validationActions": []any{"Deny", "Warn"}}}, "/leaseGuard/validationActions"},
		{"lease guard unknown action", map[string]any{"leaseGuard": map[string]any{"validationActions": []any{"Block"}}}, "/leaseGuard/validationActions/0"},
		{"lease guard no action", map[string]any{"leaseGuard": map[string]any{"validationActions": []any{}}}, "/leaseGuard/validationActions"},
		{"alert duration", map[string]any{"metrics": map[string]any{"prometheusRule": map[string]any{"alerts": map[string]any{
			"forbidden": map[string]any{"enabled": true, "for": "five minutes", "severity": "warning"}}}}}, "/metrics/prometheusRule/alerts/forbidden/for"},
		{"port out of range", wh("ports", map[string]any{"webhook": 70000}), "/webhook/ports/webhook"},
		{"existing webhook SA without a name", wh("serviceAccount", map[string]any{"create": false}), "/webhook/serviceAccount"},
		{"prometheus duration out of order", map[string]any{"metrics": map[string]any{"serviceMonitor": map[string]any{"interval": "30s1m"}}}, "/metrics/serviceMonitor/interval"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Render(Name, testNS, tc.values)
			if err == nil {
				t.Fatal("rendered; want a schema error")
			}
			if !strings.Contains(err.Error(), "schema") || !strings.Contains(err.Error(), tc.path) {
				t.Fatalf("error does not name %q:\n%v", tc.path, err)
			}
		})
	}

	// Positive controls: the bounds themselves are accepted.
	for _, v := range []map[string]any{wh("timeoutSeconds", 1), wh("timeoutSeconds", 30), sa("default-writer"),
		wh("serviceAccount", map[string]any{"create": false, "name": "ehdb-guard"}),
		map[string]any{"leaseGuard": map[string]any{"validationActions": []any{"Warn", "Audit"}}}} {
		if _, err := Render(Name, testNS, v); err != nil {
			t.Errorf("valid values %v refused: %v", v, err)
		}
	}
}

// TestDefaultServiceAccountIsRefusedClearly (issue 18): `default` as the writer's or the webhook's
// account is refused with the chart's own reason, not the schema validator's "'allOf' failed /
// 'not' failed" (a schema cannot say why; the template can).
func TestDefaultServiceAccountIsRefusedClearly(t *testing.T) {
	for _, tc := range []struct {
		values map[string]any
		want   string
	}{
		{map[string]any{"writer": map[string]any{"serviceAccount": map[string]any{"name": "default"}}}, "writer.serviceAccount.name must name a dedicated ServiceAccount, not \"default\""},
		{map[string]any{"webhook": map[string]any{"serviceAccount": map[string]any{"name": "default"}}}, "webhook.serviceAccount.name must not be \"default\""},
		{map[string]any{"webhook": map[string]any{"serviceAccount": map[string]any{"create": false, "name": "default"}}}, "webhook.serviceAccount.name must not be \"default\""},
		// "*" with names was accepted and meant "*": the names looked like a scope and were none.
		{map[string]any{"webhook": map[string]any{"guardedNamespaces": []any{"*", "noetl"}}}, `webhook.guardedNamespaces: "*" (every namespace) stands alone`},
	} {
		_, err := Render(Name, testNS, tc.values)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%v: err = %v, want the chart's message %q", tc.values, err, tc.want)
		}
		for _, noise := range []string{"'allOf' failed", "'not' failed"} {
			if err != nil && strings.Contains(err.Error(), noise) {
				t.Errorf("%v: the refusal says %q: %v", tc.values, noise, err)
			}
		}
	}
}

// TestTemplateRefusesDefaultSAWithoutSchema: the templates check the ServiceAccount names too, so an
// install with --skip-schema-validation still cannot bind a Role to `default`.
func TestTemplateRefusesDefaultSAWithoutSchema(t *testing.T) {
	ch, err := Load()
	if err != nil {
		t.Fatal(err)
	}
	ch.Schema = nil
	sa := func(part string, v map[string]any) map[string]any {
		return map[string]any{part: map[string]any{"serviceAccount": v}}
	}
	for _, tc := range []struct {
		values map[string]any
		want   string
	}{
		{sa("writer", map[string]any{"name": "default"}), "dedicated ServiceAccount"},
		{sa("writer", map[string]any{"name": ""}), "dedicated ServiceAccount"},
		{sa("webhook", map[string]any{"name": "default"}), "must not be \"default\""},
		{sa("webhook", map[string]any{"create": false, "name": "default"}), "must not be \"default\""},
		{sa("webhook", map[string]any{"create": false}), "needs webhook.serviceAccount.name"},
	} {
		_, err := RenderChart(ch, Name, testNS, tc.values)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%v without the schema: err = %v, want the template's refusal %q", tc.values, err, tc.want)
		}
	}
}

func TestWebhookDeploymentFollowsTheContract(t *testing.T) {
	cases := []struct {
		name         string
		values       map[string]any
		certRotation string
	}{
		{"self-managed TLS", nil, "true"},
		{"cert-manager TLS", mustValuesFile(t, "ci/certmanager-values.yaml"), "false"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			r := mustRender(t, tc.values)
			d := typed[appsv1.Deployment](t, r.Find("Deployment", "ehdb-election-webhook"))
			if *d.Spec.Replicas != 2 {
				t.Errorf("replicas = %d, want 2", *d.Spec.Replicas)
			}
			pod := d.Spec.Template.Spec
			if len(pod.Containers) != 1 || len(pod.InitContainers) != 0 {
				t.Fatalf("want one container, got %d (+%d init)", len(pod.Containers), len(pod.InitContainers))
			}
			c := pod.Containers[0]
			if c.Image != "ghcr.io/noetl/ehdb-election-webhook:0.3.0" {
				t.Errorf("image = %s, want the chart's appVersion tag", c.Image)
			}
			wantArgs := []string{
				"--namespace=" + testNS,
				"--webhook-port=9443",
				"--cert-dir=/certs",
				"--cert-rotation=" + tc.certRotation,
				"--cert-secret-name=ehdb-election-webhook-tls",
				"--service-name=ehdb-election-webhook",
				"--webhook-config-name=ehdb-election",
				"--metrics-bind-address=:8080",
				"--health-probe-bind-address=:8081",
				"--require-live-lease=true",
				"--guarded-namespaces=" + testNS,
				"--log-level=info",
			}
			if !reflect.DeepEqual(c.Args, wantArgs) {
				t.Errorf("args:\n got %q\nwant %q", c.Args, wantArgs)
			}
			if len(c.Command) != 0 {
				t.Errorf("command %q overrides the image's entrypoint /ehdb-webhook", c.Command)
			}
			// The webhook's own pod template must never match its own matchConditions, or a webhook
			// outage would block the webhook's own rollout.
			if len(c.EnvFrom) != 0 {
				t.Errorf("the webhook container uses envFrom: its own pods would reach it")
			}
			for _, e := range c.Env {
				if e.Name == "NOETL_EHDB_FENCING" {
					t.Errorf("the webhook container sets NOETL_EHDB_FENCING")
				}
			}

			// Restricted pod security.
			psc, sc := pod.SecurityContext, c.SecurityContext
			if psc == nil || sc == nil {
				t.Fatal("missing security contexts")
			}
			if psc.RunAsNonRoot == nil || !*psc.RunAsNonRoot || psc.SeccompProfile == nil || psc.SeccompProfile.Type != corev1.SeccompProfileTypeRuntimeDefault {
				t.Errorf("pod securityContext not restricted: %+v", psc)
			}
			if sc.AllowPrivilegeEscalation == nil || *sc.AllowPrivilegeEscalation || sc.ReadOnlyRootFilesystem == nil || !*sc.ReadOnlyRootFilesystem ||
				sc.Capabilities == nil || !reflect.DeepEqual(sc.Capabilities.Drop, []corev1.Capability{"ALL"}) || len(sc.Capabilities.Add) != 0 ||
				sc.RunAsNonRoot == nil || !*sc.RunAsNonRoot || sc.SeccompProfile == nil || sc.SeccompProfile.Type != corev1.SeccompProfileTypeRuntimeDefault {
				t.Errorf("container securityContext not restricted: %+v", sc)
			}

			// Probes on the health port.
			if p := c.ReadinessProbe; p == nil || p.HTTPGet == nil || p.HTTPGet.Path != "/readyz" || p.HTTPGet.Port.String() != "health" {
				t.Errorf("readiness probe = %+v, want GET /readyz on health", p)
			}
			if p := c.LivenessProbe; p == nil || p.HTTPGet == nil || p.HTTPGet.Path != "/healthz" || p.HTTPGet.Port.String() != "health" {
				t.Errorf("liveness probe = %+v, want GET /healthz on health", p)
			}
			ports := map[string]int32{}
			for _, p := range c.Ports {
				ports[p.Name] = p.ContainerPort
			}
			if want := map[string]int32{"webhook": 9443, "metrics": 8080, "health": 8081}; !reflect.DeepEqual(ports, want) {
				t.Errorf("ports = %v, want %v", ports, want)
			}

			// The TLS Secret, mounted read-only at /certs.
			if len(c.VolumeMounts) != 1 || c.VolumeMounts[0].MountPath != "/certs" || !c.VolumeMounts[0].ReadOnly {
				t.Errorf("volumeMounts = %+v, want the certificate read-only at /certs", c.VolumeMounts)
			}
			if len(pod.Volumes) != 1 || pod.Volumes[0].Secret == nil || pod.Volumes[0].Secret.SecretName != "ehdb-election-webhook-tls" {
				t.Errorf("volumes = %+v, want Secret ehdb-election-webhook-tls", pod.Volumes)
			}
			if tc.certRotation == "true" {
				s := typed[corev1.Secret](t, r.Find("Secret", "ehdb-election-webhook-tls"))
				if len(s.Data) != 0 || len(s.StringData) != 0 || s.Type != corev1.SecretTypeOpaque {
					t.Errorf("TLS Secret must be rendered empty and Opaque (the rotator fills it): %+v", s)
				}
			} else if r.Find("Secret", "ehdb-election-webhook-tls") != nil {
				t.Errorf("cert-manager mode renders the Secret cert-manager owns")
			}

			// Spread and disruption.
			aa := pod.Affinity
			if aa == nil || aa.PodAntiAffinity == nil || len(aa.PodAntiAffinity.PreferredDuringSchedulingIgnoredDuringExecution) != 1 ||
				len(aa.PodAntiAffinity.RequiredDuringSchedulingIgnoredDuringExecution) != 0 {
				t.Errorf("affinity = %+v, want one preferred pod anti-affinity term", aa)
			}
			pdb := typed[policyv1.PodDisruptionBudget](t, r.Find("PodDisruptionBudget", "ehdb-election-webhook"))
			if pdb.Spec.MinAvailable == nil || pdb.Spec.MinAvailable.IntValue() != 1 ||
				!reflect.DeepEqual(pdb.Spec.Selector.MatchLabels, d.Spec.Selector.MatchLabels) {
				t.Errorf("PDB = %+v, want minAvailable 1 over the Deployment's pods", pdb.Spec)
			}
			svc := typed[corev1.Service](t, r.Find("Service", "ehdb-election-webhook"))
			if !reflect.DeepEqual(svc.Spec.Selector, d.Spec.Selector.MatchLabels) {
				t.Errorf("Service selector %v does not select the Deployment's pods %v", svc.Spec.Selector, d.Spec.Selector.MatchLabels)
			}
		})
	}
}

func TestOptionsReachTheDeployment(t *testing.T) {
	r := mustRender(t, mustValuesFile(t, "ci/full-values.yaml"))
	d := typed[appsv1.Deployment](t, r.Find("Deployment", "ehdb-election-webhook"))
	pod := d.Spec.Template.Spec
	c := pod.Containers[0]
	checks := []struct {
		what string
		ok   bool
	}{
		{"replicas 3", *d.Spec.Replicas == 3},
		{"image digest", c.Image == "ghcr.io/noetl/ehdb-election-webhook:0.1.0@sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"},
		{"pullPolicy", c.ImagePullPolicy == corev1.PullAlways},
		{"imagePullSecrets", reflect.DeepEqual(pod.ImagePullSecrets, []corev1.LocalObjectReference{{Name: "ghcr-pull"}})},
		{"priorityClassName", pod.PriorityClassName == "ehdb-test-high"},
		{"nodeSelector", pod.NodeSelector["kubernetes.io/os"] == "linux"},
		{"tolerations", len(pod.Tolerations) == 1 && pod.Tolerations[0].Key == "dedicated"},
		{"topologySpreadConstraints", len(pod.TopologySpreadConstraints) == 1},
		{"podAnnotations", d.Spec.Template.Annotations["example.com/restart"] == "1"},
		{"podLabels", d.Spec.Template.Labels["example.com/team"] == "storage"},
		{"resources", c.Resources.Limits.Cpu().String() == "1"},
		{"serviceAccount", pod.ServiceAccountName == "ehdb-guard"},
		{"logLevel", slices.Contains(c.Args, "--log-level=debug")},
		{"extraArgs", c.Args[len(c.Args)-1] == "--log-level=debug"},
		{"commonLabels", d.Labels["team"] == "storage"},
	}
	for _, ck := range checks {
		if !ck.ok {
			t.Errorf("option not applied: %s", ck.what)
		}
	}
	crb := typed[rbacv1.ClusterRoleBinding](t, r.Find("ClusterRoleBinding", "ehdb-election-webhook"))
	if crb.Subjects[0].Name != "ehdb-guard" {
		t.Errorf("ClusterRoleBinding binds %s, not the renamed webhook ServiceAccount", crb.Subjects[0].Name)
	}
	if r.Find("ServiceAccount", "ehdb-guard") == nil {
		t.Error("renamed webhook ServiceAccount not rendered")
	}
	vwc := typed[admissionregistrationv1.ValidatingWebhookConfiguration](t, r.Find("ValidatingWebhookConfiguration", "ehdb-election"))
	if vwc.Annotations["example.com/reviewed"] != "yes" || vwc.Labels["example.com/owner"] != "storage-team" {
		t.Errorf("webhook annotations/labels not applied: %v %v", vwc.Annotations, vwc.Labels)
	}
	for _, w := range vwc.Webhooks {
		if *w.ClientConfig.Service.Port != 8443 || *w.TimeoutSeconds != 10 {
			t.Errorf("%s: service port %d timeout %d, want 8443 and 10", w.Name, *w.ClientConfig.Service.Port, *w.TimeoutSeconds)
		}
		if w.Rules[0].Scope != nil && *w.Rules[0].Scope == admissionregistrationv1.ClusterScope {
			continue // cluster-scoped objects: a namespaceSelector would never skip them
		}
		if w.NamespaceSelector.MatchLabels["ehdb.noetl.io/guarded"] != "true" || len(w.NamespaceSelector.MatchExpressions) != 2 {
			t.Errorf("%s: extra namespaceSelector not ANDed in: %+v", w.Name, w.NamespaceSelector)
		}
		// webhook.objectSelector is gone (a per-object bypass): see TestObjectSelectorIsGone.
		if s := w.ObjectSelector; s != nil && (len(s.MatchLabels) > 0 || len(s.MatchExpressions) > 0) {
			t.Errorf("%s: objectSelector %+v, want none", w.Name, w.ObjectSelector)
		}
	}
	if pdb := typed[policyv1.PodDisruptionBudget](t, r.Find("PodDisruptionBudget", "ehdb-election-webhook")); pdb.Spec.MinAvailable.IntValue() != 2 {
		t.Errorf("PDB minAvailable = %v, want 2", pdb.Spec.MinAvailable)
	}

	// One replica: no PodDisruptionBudget (minAvailable 1 of 1 would block every drain).
	if r := mustRender(t, mustValuesFile(t, "ci/permissive-values.yaml")); r.Find("PodDisruptionBudget", "ehdb-election-webhook") != nil {
		t.Error("PDB rendered for a single replica")
	}
	// requireLiveLease is the policy switch for the order check.
	r = mustRender(t, map[string]any{"webhook": map[string]any{"requireLiveLease": false}})
	if args := typed[appsv1.Deployment](t, r.Find("Deployment", "ehdb-election-webhook")).Spec.Template.Spec.Containers[0].Args; !slices.Contains(args, "--require-live-lease=false") {
		t.Errorf("requireLiveLease=false not passed: %q", args)
	}
}

func TestWebhookConfiguration(t *testing.T) {
	cases := []struct {
		name            string
		values          map[string]any
		workloads, pods admissionregistrationv1.FailurePolicyType
		timeout         int32
		excluded        []string
		injectCAFrom    string
		guarded         []string // the namespaces an `In` term limits the guard to; nil = no such term
	}{
		{"defaults", nil, "Fail", "Ignore", 5, []string{"kube-system"}, "", []string{testNS}},
		{"permissive", mustValuesFile(t, "ci/permissive-values.yaml"), "Ignore", "Ignore", 30, nil, "", []string{testNS}},
		{"cert-manager", mustValuesFile(t, "ci/certmanager-values.yaml"), "Fail", "Ignore", 5, []string{"kube-system"}, testNS + "/ehdb-election-webhook-ca", []string{testNS}},
		{"more writer namespaces", map[string]any{"webhook": map[string]any{"guardedNamespaces": []any{"team-a", testNS, "team-b"}}},
			"Fail", "Ignore", 5, []string{"kube-system"}, "", []string{testNS, "team-a", "team-b"}},
		{"every namespace", map[string]any{"webhook": map[string]any{"guardedNamespaces": []any{"*"}}},
			"Fail", "Ignore", 5, []string{"kube-system"}, "", nil},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			r := mustRender(t, tc.values)
			vwc := typed[admissionregistrationv1.ValidatingWebhookConfiguration](t, r.Find("ValidatingWebhookConfiguration", "ehdb-election"))
			if got := vwc.Annotations["cert-manager.io/inject-ca-from"]; got != tc.injectCAFrom {
				t.Errorf("inject-ca-from = %q, want %q", got, tc.injectCAFrom)
			}
			if len(vwc.Webhooks) != 9 {
				t.Fatalf("%d webhook entries, want 9", len(vwc.Webhooks))
			}
			byName := map[string]admissionregistrationv1.ValidatingWebhook{}
			for _, h := range vwc.Webhooks {
				byName[strings.TrimSuffix(h.Name, ".ehdb-election.noetl.io")] = h
			}
			workloads, pods, podMetadata, configMaps := byName["workloads"], byName["pods"], byName["podmetadata"], byName["configmaps"]
			// The Services whose link variables land on what the election reads, only: the
			// webhook's own list of their names, no more and no fewer.
			wantNames := "object.metadata.name in ['" + strings.Join(webhook.LinkedServiceNames(), "', '") + "']"
			if svc := byName["services"]; len(svc.Rules) != 1 || !slices.Equal(svc.Rules[0].Resources, []string{"services"}) || *svc.FailurePolicy != tc.workloads ||
				len(svc.MatchConditions) != 1 || svc.MatchConditions[0].Expression != wantNames || !reflect.DeepEqual(svc.NamespaceSelector, workloads.NamespaceSelector) {
				t.Errorf("services entry: %+v", svc)
			}
			for _, sub := range []struct {
				name      string
				resources [][]string
			}{
				{"ephemeralcontainers", [][]string{{"pods/ephemeralcontainers"}}},
				{"scale", [][]string{{"statefulsets/scale", "deployments/scale", "replicasets/scale"}, {"replicationcontrollers/scale"}}},
			} {
				h := byName[sub.name]
				ok := len(h.Rules) == len(sub.resources) && *h.FailurePolicy == tc.workloads && len(h.MatchConditions) == 1 && reflect.DeepEqual(h.NamespaceSelector, workloads.NamespaceSelector)
				for i := 0; ok && i < len(h.Rules); i++ {
					ok = slices.Equal(h.Rules[i].Resources, sub.resources[i]) && slices.Equal(h.Rules[i].Operations, []admissionregistrationv1.OperationType{"UPDATE"})
				}
				if !ok {
					t.Errorf("%s entry: %+v", sub.name, h)
				}
			}
			// The disarming entries (issue 17): namespaced RBAC and ServiceAccounts with the workloads'
			// scope and failure policy; the cluster-scoped RBAC with its own (fail open by default).
			rbacEntry, clusterEntry := byName["rbac"], byName["clusterrbac"]
			if len(rbacEntry.Rules) != 2 || !slices.Equal(rbacEntry.Rules[0].Resources, []string{"roles", "rolebindings"}) || !slices.Equal(rbacEntry.Rules[1].Resources, []string{"serviceaccounts"}) ||
				*rbacEntry.FailurePolicy != tc.workloads || len(rbacEntry.MatchConditions) != 2 || rbacEntry.MatchConditions[1].Name != "not-the-namespace-controller" || !reflect.DeepEqual(rbacEntry.NamespaceSelector, workloads.NamespaceSelector) {
				t.Errorf("rbac entry: %+v", rbacEntry)
			}
			if len(clusterEntry.Rules) != 1 || !slices.Equal(clusterEntry.Rules[0].Resources, []string{"clusterroles", "clusterrolebindings"}) ||
				*clusterEntry.Rules[0].Scope != admissionregistrationv1.ClusterScope || len(clusterEntry.MatchConditions) != 1 {
				t.Errorf("clusterrbac entry: %+v", clusterEntry)
			}
			// Updates and deletes can take access away; creates and updates of RBAC can give an
			// account every verb on leases, which the lease guard refuses (red team N of stop 33).
			for _, h := range []admissionregistrationv1.ValidatingWebhook{rbacEntry, clusterEntry} {
				for _, r := range h.Rules {
					want := []admissionregistrationv1.OperationType{"CREATE", "UPDATE", "DELETE"}
					if slices.Equal(r.Resources, []string{"serviceaccounts"}) {
						want = want[1:]
					}
					if !slices.Equal(r.Operations, want) {
						t.Errorf("%s sends %v for %v; want %v", h.Name, r.Operations, r.Resources, want)
					}
				}
			}
			wantCMRules := []admissionregistrationv1.RuleWithOperations{
				{Operations: []admissionregistrationv1.OperationType{"CREATE", "UPDATE", "DELETE"}, Rule: admissionregistrationv1.Rule{
					APIGroups: []string{""}, APIVersions: []string{"v1"}, Resources: []string{"configmaps"}, Scope: ptrTo(admissionregistrationv1.NamespacedScope)}},
			}
			if configMaps.Name != "configmaps.ehdb-election.noetl.io" || !reflect.DeepEqual(configMaps.Rules, wantCMRules) || *configMaps.FailurePolicy != tc.workloads ||
				len(configMaps.MatchConditions) != 1 || configMaps.MatchConditions[0].Name != "not-the-namespace-controller" || !reflect.DeepEqual(configMaps.NamespaceSelector, workloads.NamespaceSelector) {
				t.Errorf("ConfigMap entry: %+v", configMaps)
			}
			wantWorkloadRules := []admissionregistrationv1.RuleWithOperations{
				{Operations: []admissionregistrationv1.OperationType{"CREATE", "UPDATE"}, Rule: admissionregistrationv1.Rule{
					APIGroups: []string{"apps"}, APIVersions: []string{"v1"}, Resources: []string{"statefulsets", "deployments", "daemonsets", "replicasets"}, Scope: ptrTo(admissionregistrationv1.NamespacedScope)}},
				{Operations: []admissionregistrationv1.OperationType{"CREATE", "UPDATE"}, Rule: admissionregistrationv1.Rule{
					APIGroups: []string{"batch"}, APIVersions: []string{"v1"}, Resources: []string{"jobs", "cronjobs"}, Scope: ptrTo(admissionregistrationv1.NamespacedScope)}},
				{Operations: []admissionregistrationv1.OperationType{"CREATE", "UPDATE"}, Rule: admissionregistrationv1.Rule{
					APIGroups: []string{""}, APIVersions: []string{"v1"}, Resources: []string{"replicationcontrollers"}, Scope: ptrTo(admissionregistrationv1.NamespacedScope)}},
			}
			if !reflect.DeepEqual(workloads.Rules, wantWorkloadRules) {
				t.Errorf("workload rules:\n got %+v\nwant %+v", workloads.Rules, wantWorkloadRules)
			}
			// UPDATE: a Pod's labels and annotations change, and a fieldRef to them is resolved
			// at every container start; a binding copies a Binding's onto the Pod.
			wantPodRules := []admissionregistrationv1.RuleWithOperations{
				{Operations: []admissionregistrationv1.OperationType{"CREATE"}, Rule: admissionregistrationv1.Rule{
					APIGroups: []string{""}, APIVersions: []string{"v1"}, Resources: []string{"pods", "pods/binding", "bindings"}, Scope: ptrTo(admissionregistrationv1.NamespacedScope)}},
			}
			if !reflect.DeepEqual(pods.Rules, wantPodRules) {
				t.Errorf("pod rules:\n got %+v\nwant %+v", pods.Rules, wantPodRules)
			}
			// The edits of a running Pod's labels and annotations fail closed: they create nothing.
			wantMetadataRules := []admissionregistrationv1.RuleWithOperations{
				{Operations: []admissionregistrationv1.OperationType{"UPDATE"}, Rule: admissionregistrationv1.Rule{
					APIGroups: []string{""}, APIVersions: []string{"v1"}, Resources: []string{"pods", "pods/status"}, Scope: ptrTo(admissionregistrationv1.NamespacedScope)}},
			}
			if !reflect.DeepEqual(podMetadata.Rules, wantMetadataRules) {
				t.Errorf("pod metadata rules:\n got %+v\nwant %+v", podMetadata.Rules, wantMetadataRules)
			}
			for _, w := range []struct {
				hook admissionregistrationv1.ValidatingWebhook
				fp   admissionregistrationv1.FailurePolicyType
			}{{workloads, tc.workloads}, {pods, tc.pods}, {podMetadata, tc.workloads}} {
				h := w.hook
				if *h.FailurePolicy != w.fp {
					t.Errorf("%s failurePolicy = %s, want %s", h.Name, *h.FailurePolicy, w.fp)
				}
				if *h.TimeoutSeconds != tc.timeout || *h.SideEffects != admissionregistrationv1.SideEffectClassNone ||
					!reflect.DeepEqual(h.AdmissionReviewVersions, []string{"v1"}) {
					t.Errorf("%s: timeout %d sideEffects %s versions %v", h.Name, *h.TimeoutSeconds, *h.SideEffects, h.AdmissionReviewVersions)
				}
				if s := h.ClientConfig.Service; s == nil || s.Name != "ehdb-election-webhook" || s.Namespace != testNS || *s.Path != "/validate" || h.ClientConfig.URL != nil {
					t.Errorf("%s clientConfig = %+v, want the webhook Service at /validate", h.Name, h.ClientConfig)
				}
				if len(h.ClientConfig.CABundle) != 0 {
					t.Errorf("%s renders a caBundle: an upgrade would overwrite the rotator's", h.Name)
				}
				var excluded, guarded []string
				for _, e := range h.NamespaceSelector.MatchExpressions {
					if e.Key == "kubernetes.io/metadata.name" && e.Operator == "NotIn" {
						excluded = append(excluded, e.Values...)
					}
					if e.Key == "kubernetes.io/metadata.name" && e.Operator == "In" {
						guarded = append(guarded, e.Values...)
					}
				}
				if !slices.Equal(excluded, tc.excluded) {
					t.Errorf("%s excludes namespaces %v, want %v", h.Name, excluded, tc.excluded)
				}
				if !slices.Equal(guarded, tc.guarded) {
					t.Errorf("%s guards namespaces %v, want %v", h.Name, guarded, tc.guarded)
				}
				if len(h.MatchConditions) != 1 || !strings.Contains(h.MatchConditions[0].Expression, "NOETL_EHDB_FENCING") ||
					!strings.Contains(h.MatchConditions[0].Expression, "envFrom") || !strings.Contains(h.MatchConditions[0].Expression, "initContainers") {
					t.Errorf("%s matchConditions = %+v", h.Name, h.MatchConditions)
				}
			}
			if !strings.Contains(workloads.MatchConditions[0].Expression, "object.spec.jobTemplate.spec.template.spec.containers") ||
				!strings.Contains(workloads.MatchConditions[0].Expression, "object.spec.template.spec.containers") {
				t.Errorf("workload matchCondition misses the CronJob or the plain template path: %s", workloads.MatchConditions[0].Expression)
			}

			// Offline (`helm template`, what GitOps tools apply) there is no pre-delete copy: only Helm,
			// rendering against the cluster, gets it (TestUninstallRemovesTheWebhookConfigurationFirst).
			for _, h := range r.Hooks {
				if h.GetKind() == "ValidatingWebhookConfiguration" {
					t.Errorf("an offline render holds the hook %s", h.GetName())
				}
			}
		})
	}
}

// TestHelmDeletesTheWebhookConfigurationLast is the premise of the pre-delete hook: left to its kind
// order, `helm uninstall` deletes the Service and the Deployment before the webhook configuration.
// If a Helm release changes that order, this test says the hook may no longer be needed.
func TestHelmDeletesTheWebhookConfigurationLast(t *testing.T) {
	r := mustRender(t, nil)
	order, err := UninstallOrder(r.Manifest)
	if err != nil {
		t.Fatal(err)
	}
	pos := func(id string) int {
		i := slices.Index(order, id)
		if i < 0 {
			t.Fatalf("%s not in %v", id, order)
		}
		return i
	}
	vwc := pos("ValidatingWebhookConfiguration/ehdb-election")
	for _, id := range []string{"Service/ehdb-election-webhook", "Deployment/ehdb-election-webhook"} {
		if pos(id) > vwc {
			t.Errorf("helm deletes %s after the webhook configuration; order: %v", id, order)
		}
	}
}

func TestLeaseGuardPolicy(t *testing.T) {
	r := mustRender(t, nil)
	vap := typed[admissionregistrationv1.ValidatingAdmissionPolicy](t, r.Find("ValidatingAdmissionPolicy", "ehdb-election-lease-guard.noetl"))
	if *vap.Spec.FailurePolicy != admissionregistrationv1.Fail {
		t.Errorf("failurePolicy = %s, want Fail", *vap.Spec.FailurePolicy)
	}
	rules := vap.Spec.MatchConstraints.ResourceRules
	if len(rules) != 1 || !reflect.DeepEqual(rules[0].APIGroups, []string{"coordination.k8s.io"}) || !reflect.DeepEqual(rules[0].Resources, []string{"leases"}) ||
		!reflect.DeepEqual(rules[0].Operations, []admissionregistrationv1.OperationType{"CREATE", "UPDATE", "DELETE"}) {
		t.Errorf("matchConstraints = %+v", rules)
	}
	b := typed[admissionregistrationv1.ValidatingAdmissionPolicyBinding](t, r.Find("ValidatingAdmissionPolicyBinding", "ehdb-election-lease-guard.noetl"))
	if b.Spec.PolicyName != vap.Name || !reflect.DeepEqual(b.Spec.ValidationActions, []admissionregistrationv1.ValidationAction{"Deny"}) {
		t.Errorf("binding = %+v", b.Spec)
	}
	if got := b.Spec.MatchResources.NamespaceSelector.MatchLabels; !reflect.DeepEqual(got, map[string]string{"kubernetes.io/metadata.name": testNS}) {
		t.Errorf("binding namespaceSelector = %v, want the release namespace only", got)
	}
	if r := mustRender(t, map[string]any{"leaseGuard": map[string]any{"enabled": false}}); r.Find("ValidatingAdmissionPolicy", vap.Name) != nil || r.Find("ValidatingAdmissionPolicyBinding", b.Name) != nil {
		t.Error("leaseGuard.enabled=false still renders the policy")
	}
}

func TestWriterRBACOnlyRelease(t *testing.T) {
	r := mustRender(t, mustValuesFile(t, "ci/writer-rbac-only-values.yaml"))
	for _, o := range append(slices.Clone(r.Objects), r.Hooks...) {
		if o.GetLabels()["app.kubernetes.io/component"] == "webhook" {
			t.Errorf("webhook.enabled=false renders %s/%s", o.GetKind(), o.GetName())
		}
	}
	for _, id := range [][2]string{{"Role", "ehdb-shard-election"}, {"RoleBinding", "ehdb-shard-election"}, {"ServiceAccount", "noetl-cmdbus-writer"}, {"ValidatingAdmissionPolicy", "ehdb-election-lease-guard.noetl"}} {
		if r.Find(id[0], id[1]) == nil {
			t.Errorf("%s/%s missing", id[0], id[1])
		}
	}
}

func TestNotesGiveTheStepsInTheDesignsOrder(t *testing.T) {
	notes := mustRender(t, nil).Notes
	steps := []string{
		"1. Bind the ServiceAccount", "serviceAccountName\":\"noetl-cmdbus-writer",
		"2. Enable the election", "NOETL_EHDB_ELECTION=true",
		"3. Verify it is minting", "ehdb_election_token_valid 1", "ehdb_election_epoch >= 1",
		"4. Only then enforce", "NOETL_EHDB_FENCING=enforce",
	}
	inOrder(t, notes, -1, steps...)
}

// inOrder asserts that notes says each of want, in that order, after position from.
func inOrder(t *testing.T, notes string, from int, want ...string) {
	t.Helper()
	last := from
	for _, s := range want {
		i := strings.Index(notes, s)
		if i < 0 {
			t.Fatalf("NOTES.txt lacks %q:\n%s", s, notes)
		}
		if i < last {
			t.Errorf("NOTES.txt gives %q out of order", s)
		}
		last = i
	}
}

// TestReadmeDocumentsEveryValue: the README's values table names every key of values.yaml.
func TestReadmeDocumentsEveryValue(t *testing.T) {
	dir, err := chartinstall.ChartDir()
	if err != nil {
		t.Fatal(err)
	}
	data, err := os.ReadFile(filepath.Join(dir, "values.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var values map[string]any
	if err := yaml.Unmarshal(data, &values); err != nil {
		t.Fatal(err)
	}
	readme, err := os.ReadFile(filepath.Join(dir, "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	documented := map[string]bool{}
	sc := bufio.NewScanner(strings.NewReader(string(readme)))
	for sc.Scan() {
		if line := sc.Text(); strings.HasPrefix(line, "| `") {
			documented[strings.SplitN(strings.TrimPrefix(line, "| `"), "`", 2)[0]] = true
		}
	}
	var keys []string
	var walk func(prefix string, m map[string]any)
	walk = func(prefix string, m map[string]any) {
		for k, v := range m {
			key := strings.TrimPrefix(prefix+"."+k, ".")
			if sub, ok := v.(map[string]any); ok && len(sub) > 0 && !leafMaps[key] {
				walk(key, sub)
				continue
			}
			keys = append(keys, key)
		}
	}
	walk("", values)
	sort.Strings(keys)
	for _, k := range keys {
		if !documented[k] {
			t.Errorf("README.md values table lacks `%s`", k)
		}
	}
}

// leafMaps are values documented as a whole (Kubernetes-shaped objects), not key by key.
var leafMaps = map[string]bool{
	"webhook.resources":          true,
	"webhook.podSecurityContext": true,
	"webhook.securityContext":    true,
	"networkPolicy.egress":       true,
}

func ptrTo[T any](v T) *T { return &v }

func nilIfEmpty(m map[string]string) map[string]string {
	if len(m) == 0 {
		return nil
	}
	return m
}
