package main

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"testing"
	"time"

	admissionv1 "k8s.io/api/admission/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/noetl/ehdb-election/internal/testcluster"
	wt "github.com/noetl/ehdb-election/webhook/webhooktest"
)

// TestEveryReplicaForgetsItsAllowedAnswersOnAnRBACChange runs two webhook processes, as the
// chart's two replicas, each with its own watches and a positive cache that would keep "allowed"
// for an hour. Both answer an armed writer "allowed"; then its RoleBinding is deleted behind
// their backs (no armed writer exists yet, so nothing refuses it). Each replica must refuse the
// same writer well inside the cache's lifetime: its own RBAC watch dropped its cache. A replica
// that relied on another's invalidation, or on the TTL, would keep admitting.
func TestEveryReplicaForgetsItsAllowedAnswersOnAnRBACChange(t *testing.T) {
	c := testcluster.ForTest(t)
	cs := c.Clientset()
	ns := c.NewNamespace(t)
	ctx := context.Background()

	if _, err := cs.CoreV1().ServiceAccounts(ns).Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: wt.WriterSA}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	bindWriter(t, cs, ns)

	type replica struct{ probes, validate string }
	var replicas []replica
	var pool *x509.CertPool
	for range 2 {
		dir := t.TempDir()
		ca := servingCert(t, dir)
		if pool == nil {
			pool = x509.NewCertPool()
		}
		pool.AppendCertsFromPEM(ca)
		port := freePort(t)
		probes, _ := startWebhook(t, []string{
			"--kubeconfig=" + c.Kubeconfig, "--cert-rotation=false", "--cert-dir=" + dir,
			"--webhook-host=127.0.0.1", "--webhook-port=" + strconv.Itoa(port), "--namespace=" + ns,
			"--cache-allowed-ttl=1h", "--require-live-lease=false",
		}, nil)
		replicas = append(replicas, replica{probes, fmt.Sprintf("https://127.0.0.1:%d/validate", port)})
	}
	client := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}}}
	for _, r := range replicas {
		waitReady(t, 30*time.Second, r.probes)
	}

	writer := wt.ReferenceWriter(ns, wt.Armed(), wt.ElectionOn(), wt.ServiceAccount(wt.WriterSA))
	raw, err := json.Marshal(writer)
	if err != nil {
		t.Fatal(err)
	}
	// review sends the writer's CREATE to one replica directly and returns its answer.
	review := func(url string) (*admissionv1.AdmissionResponse, error) {
		body, err := json.Marshal(admissionv1.AdmissionReview{
			TypeMeta: metav1.TypeMeta{APIVersion: "admission.k8s.io/v1", Kind: "AdmissionReview"},
			Request: &admissionv1.AdmissionRequest{
				UID: types.UID(fmt.Sprintf("replica-%d", time.Now().UnixNano())), Operation: admissionv1.Create,
				Kind:     metav1.GroupVersionKind{Group: "apps", Version: "v1", Kind: "StatefulSet"},
				Resource: metav1.GroupVersionResource{Group: "apps", Version: "v1", Resource: "statefulsets"},
				Name:     writer.Name, Namespace: ns, Object: runtime.RawExtension{Raw: raw},
			},
		})
		if err != nil {
			return nil, err
		}
		resp, err := client.Post(url+"?timeout=5s", "application/json", bytes.NewReader(body))
		if err != nil {
			return nil, err
		}
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		if err != nil || resp.StatusCode != http.StatusOK {
			return nil, fmt.Errorf("%s: %d %s %v", url, resp.StatusCode, b, err)
		}
		var out admissionv1.AdmissionReview
		if err := json.Unmarshal(b, &out); err != nil || out.Response == nil {
			return nil, fmt.Errorf("%s: undecodable answer %s: %v", url, b, err)
		}
		return out.Response, nil
	}

	// Both allow (and so both keep "allowed" for the ServiceAccount and its access review).
	for i, r := range replicas {
		if err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, 20*time.Second, true, func(context.Context) (bool, error) {
			resp, err := review(r.validate)
			if err != nil {
				return false, err
			}
			return resp.Allowed, nil
		}); err != nil {
			t.Fatalf("replica %d never allowed the bound writer: %v", i, err)
		}
	}

	if err := cs.RbacV1().RoleBindings(ns).Delete(ctx, "ehdb-shard-election", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	removed := time.Now()
	// A watch event takes milliseconds; 15 s is generous on a loaded machine and still far
	// inside the hour a cached "allowed" would live. Every verb the binding granted must go:
	// a first refusal may name only some of them (a loaded CI run saw "may not create" 79 ms
	// after the delete, as the API server's authorizer and the webhook's watch caught up verb by
	// verb), but a replica that kept a cached "allowed" would never name them all.
	const all = "may not get, create, update coordination.k8s.io leases"
	for i, r := range replicas {
		var last *admissionv1.AdmissionResponse
		if err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, 15*time.Second, true, func(context.Context) (bool, error) {
			resp, err := review(r.validate)
			if err != nil {
				return false, err
			}
			last = resp
			return !resp.Allowed && resp.Result != nil && bytes.Contains([]byte(resp.Result.Message), []byte(all)), nil
		}); err != nil {
			t.Fatalf("replica %d still allows the writer, or some of its access, %s after its RoleBinding was deleted (last answer %+v): %v", i, time.Since(removed).Round(time.Millisecond), last, err)
		}
		t.Logf("replica %d refuses every verb %s after the delete", i, time.Since(removed).Round(time.Millisecond))
	}
}
