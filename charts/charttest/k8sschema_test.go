package charttest

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"sort"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/serializer"

	"github.com/noetl/ehdb-election/internal/chartinstall"
)

// Kubernetes-typed values (the webhook's pod and container securityContext) are validated by the
// schema the API server itself publishes, not by hand-copied subsets: values.schema.json holds
// definitions generated from kube-apiserver's OpenAPI v3 (KubeVersion) for these types and every type
// they reference, with additionalProperties false (a typo is refused, as strict field validation
// would). TestKubernetesSchemaIsTheAPIServers regenerates them from the real API server and fails on
// any difference; EHDB_UPDATE_SCHEMA=1 writes them instead.

// k8sValueTypes maps the values that are Kubernetes types (or lists of them) to their OpenAPI names.
var k8sValueTypes = map[string]string{
	"webhook.podSecurityContext":  "io.k8s.api.core.v1.PodSecurityContext",
	"webhook.securityContext":     "io.k8s.api.core.v1.SecurityContext",
	"webhook.extraEnv[]":          "io.k8s.api.core.v1.EnvVar",
	"webhook.extraVolumes[]":      "io.k8s.api.core.v1.Volume",
	"webhook.extraVolumeMounts[]": "io.k8s.api.core.v1.VolumeMount",
}

const k8sDefPrefix = "k8s:"

// k8sDefinitions converts the OpenAPI v3 schemas of the roots, and every schema they reference, to
// JSON-schema definitions named k8sDefPrefix + the OpenAPI name.
func k8sDefinitions(schemas map[string]any, roots []string) (map[string]any, error) {
	out := map[string]any{}
	var visit func(name string) error
	visit = func(name string) error {
		if _, done := out[k8sDefPrefix+name]; done {
			return nil
		}
		s, ok := schemas[name].(map[string]any)
		if !ok {
			return fmt.Errorf("the API server's OpenAPI has no schema %s", name)
		}
		out[k8sDefPrefix+name] = nil // visiting
		var refs []string
		conv := convertSchema(s, &refs)
		out[k8sDefPrefix+name] = conv
		for _, r := range refs {
			if err := visit(r); err != nil {
				return err
			}
		}
		return nil
	}
	for _, r := range roots {
		if err := visit(r); err != nil {
			return nil, err
		}
	}
	return out, nil
}

// convertSchema keeps what validates (type, properties, items, enum, required, additionalProperties
// for maps) and drops documentation, formats and x-kubernetes extensions; an object with properties
// refuses unknown ones.
func convertSchema(s map[string]any, refs *[]string) map[string]any {
	if all, ok := s["allOf"].([]any); ok && len(all) == 1 { // a reference with a default, in OpenAPI v3
		if m, ok := all[0].(map[string]any); ok {
			return convertSchema(m, refs)
		}
	}
	if ref, ok := s["$ref"].(string); ok {
		name := strings.TrimPrefix(ref, "#/components/schemas/")
		*refs = append(*refs, name)
		return map[string]any{"$ref": "#/definitions/" + k8sDefPrefix + name}
	}
	out := map[string]any{}
	if t, ok := s["type"]; ok {
		out["type"] = t
	}
	if e, ok := s["enum"]; ok {
		out["enum"] = e
	}
	if r, ok := s["required"]; ok {
		out["required"] = r
	}
	if items, ok := s["items"].(map[string]any); ok {
		out["items"] = convertSchema(items, refs)
	}
	if props, ok := s["properties"].(map[string]any); ok {
		conv := map[string]any{}
		for k, v := range props {
			conv[k] = convertSchema(v.(map[string]any), refs)
		}
		out["properties"] = conv
		out["additionalProperties"] = false
	} else if ap, ok := s["additionalProperties"].(map[string]any); ok {
		out["additionalProperties"] = convertSchema(ap, refs)
	}
	return out
}

func TestKubernetesSchemaIsTheAPIServers(t *testing.T) {
	t.Parallel()
	r := newRelease(t, nil)
	raw, err := r.cs.CoreV1().RESTClient().Get().AbsPath("/openapi/v3/api/v1").DoRaw(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	var doc struct {
		Components struct {
			Schemas map[string]any `json:"schemas"`
		} `json:"components"`
	}
	if err := json.Unmarshal(raw, &doc); err != nil {
		t.Fatal(err)
	}
	dir, err := chartinstall.ChartDir()
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, "values.schema.json")
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var schema map[string]any
	if err := json.Unmarshal(data, &schema); err != nil {
		t.Fatal(err)
	}
	var roots []string
	for value, n := range k8sValueTypes {
		roots = append(roots, n)
		// The value refers to the generated definition.
		path := strings.Split(strings.TrimSuffix(value, "[]"), ".")
		node := schema
		for _, p := range path {
			node = node["properties"].(map[string]any)[p].(map[string]any)
		}
		if strings.HasSuffix(value, "[]") {
			node, _ = node["items"].(map[string]any)
		}
		if ref, _ := node["$ref"].(string); ref != "#/definitions/"+k8sDefPrefix+n {
			t.Errorf("value %s refers to %q, want the generated %s", value, ref, n)
		}
	}
	sort.Strings(roots)
	want, err := k8sDefinitions(doc.Components.Schemas, roots)
	if err != nil {
		t.Fatal(err)
	}
	defs := schema["definitions"].(map[string]any)
	got := map[string]any{}
	for k, v := range defs {
		if strings.HasPrefix(k, k8sDefPrefix) {
			got[k] = v
		}
	}
	if reflect.DeepEqual(got, want) {
		return
	}
	if os.Getenv("EHDB_UPDATE_SCHEMA") == "" {
		g, _ := json.MarshalIndent(got, "", "  ")
		w, _ := json.MarshalIndent(want, "", "  ")
		t.Fatalf("values.schema.json's Kubernetes definitions differ from kube-apiserver %s's OpenAPI; run with EHDB_UPDATE_SCHEMA=1 to regenerate\n--- have\n%.3000s\n--- API server\n%.3000s", KubeVersion, g, w)
	}
	for k := range got {
		delete(defs, k)
	}
	for k, v := range want {
		defs[k] = v
	}
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	enc.SetIndent("", "  ")
	if err := enc.Encode(schema); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, buf.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	t.Logf("wrote %d Kubernetes definitions into %s", len(want), path)
}

// TestKubernetesTypedValuesTakeWhatTheAPIServerTakes: fields the hand-copied subsets refused
// (supplementalGroupsPolicy, seLinuxChangePolicy, sysctls, procMount, ...) pass the schema, reach
// the Deployment, decode strictly into the real types, and the API server accepts the Deployment
// with strict field validation (a dry run); a misspelt field is refused by the schema.
func TestKubernetesTypedValuesTakeWhatTheAPIServerTakes(t *testing.T) {
	t.Parallel()
	podSC := map[string]any{
		"runAsNonRoot": true, "runAsUser": 65532, "runAsGroup": 65532, "fsGroup": 65532,
		"fsGroupChangePolicy": "OnRootMismatch", "supplementalGroups": []any{1000}, "supplementalGroupsPolicy": "Strict",
		"seLinuxChangePolicy": "MountOption", "sysctls": []any{map[string]any{"name": "net.ipv4.ip_unprivileged_port_start", "value": "0"}},
		"seccompProfile": map[string]any{"type": "RuntimeDefault"}, "appArmorProfile": map[string]any{"type": "RuntimeDefault"},
		"seLinuxOptions": map[string]any{"level": "s0:c123,c456"},
	}
	sc := map[string]any{
		"allowPrivilegeEscalation": false, "readOnlyRootFilesystem": true, "runAsNonRoot": true,
		"capabilities": map[string]any{"drop": []any{"ALL"}}, "procMount": "Default",
		"seccompProfile": map[string]any{"type": "RuntimeDefault"},
	}
	values := map[string]any{"webhook": map[string]any{"podSecurityContext": podSC, "securityContext": sc}}
	rendered, err := Render(Name, testNS, values)
	if err != nil {
		t.Fatalf("the schema refuses fields the API server accepts: %v", err)
	}
	d := rendered.Find("Deployment", "ehdb-election-webhook")
	raw, err := json.Marshal(d.Object)
	if err != nil {
		t.Fatal(err)
	}
	scheme := runtime.NewScheme()
	if err := appsv1.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	strict := serializer.NewCodecFactory(scheme, serializer.EnableStrict).UniversalDeserializer()
	obj, _, err := strict.Decode(raw, nil, nil)
	if err != nil {
		t.Fatalf("the Deployment does not decode strictly into apps/v1: %v", err)
	}
	pod := obj.(*appsv1.Deployment).Spec.Template.Spec
	if pod.SecurityContext.SupplementalGroupsPolicy == nil || *pod.SecurityContext.SupplementalGroupsPolicy != corev1.SupplementalGroupsPolicyStrict ||
		pod.SecurityContext.SELinuxChangePolicy == nil || len(pod.SecurityContext.Sysctls) != 1 ||
		pod.Containers[0].SecurityContext.ProcMount == nil || *pod.Containers[0].SecurityContext.ProcMount != corev1.DefaultProcMount {
		t.Errorf("the fields did not reach the Deployment: pod %+v, container %+v", pod.SecurityContext, pod.Containers[0].SecurityContext)
	}

	// A misspelt field is refused, naming it.
	bad := map[string]any{"webhook": map[string]any{"podSecurityContext": map[string]any{"supplementalGroupPolicy": "Strict"}}}
	if _, err := Render(Name, testNS, bad); err == nil || !strings.Contains(err.Error(), "supplementalGroupPolicy") {
		t.Errorf("a misspelt field: err = %v, want a schema refusal naming it", err)
	}
	bad = map[string]any{"webhook": map[string]any{"securityContext": map[string]any{"procMount": 3}}}
	if _, err := Render(Name, testNS, bad); err == nil || !strings.Contains(err.Error(), "procMount") {
		t.Errorf("a mistyped field: err = %v, want a schema refusal naming it", err)
	}

	// The real API server takes the Deployment, strictly.
	r := newRelease(t, nil)
	d.SetNamespace(r.ns)
	dep := obj.(*appsv1.Deployment)
	dep.Namespace = r.ns
	if _, err := r.cs.AppsV1().Deployments(r.ns).Create(context.Background(), dep, metav1.CreateOptions{
		DryRun: []string{metav1.DryRunAll}, FieldValidation: metav1.FieldValidationStrict,
	}); err != nil {
		t.Errorf("the API server refuses the rendered Deployment: %v", err)
	}
}
