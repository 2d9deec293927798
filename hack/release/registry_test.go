package main

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/validate"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/noetl/ehdb-election/internal/chartinstall"
	"github.com/noetl/ehdb-election/internal/ociimage"
	"github.com/noetl/ehdb-election/internal/ociregistry"
	"github.com/noetl/ehdb-election/internal/repo"
	"github.com/noetl/ehdb-election/internal/testcluster"
)

func TestMain(m *testing.M) { os.Exit(testcluster.Main(m)) }

// helmCLI builds (or reuses) the real helm binary with hack/helm/build.sh.
func helmCLI(t *testing.T) string {
	t.Helper()
	script, err := repo.Path("hack", "helm", "build.sh")
	if err != nil {
		t.Fatal(err)
	}
	var stderr bytes.Buffer
	cmd := exec.Command(script)
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("building the helm CLI: %v\n%s", err, stderr.String())
	}
	return strings.TrimSpace(string(out))
}

// helmRunner runs the helm CLI (chartinstall.CLI) with a temporary home; a failure fails the test.
func helmRunner(t *testing.T, bin string) func(args ...string) string {
	cli := chartinstall.CLI{Bin: bin, Home: t.TempDir()}
	return func(args ...string) string {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
		defer cancel()
		out, err := cli.Run(ctx, args...)
		if err != nil {
			t.Fatal(err)
		}
		return out
	}
}

// A release as users get it: `make release` (this package's build) for a registry, the images
// pushed to a real OCI registry (CNCF Distribution on loopback), the chart pushed with `helm push`,
// and `helm install oci://...` with the real CLI into a real API server. The installed webhook
// Deployment names the image by digest with no values given, and the registry serves exactly the
// built image under that digest.
func TestReleaseInstallsFromAnOCIRegistryPinnedByDigest(t *testing.T) {
	cluster := testcluster.ForTest(t)
	helm := helmRunner(t, helmCLI(t))
	ctx := context.Background()

	reg, err := ociregistry.Start(ctx, 0, "")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { reg.Close() })
	imageRepo := reg.Host + "/noetl/ehdb-election"
	dist := t.TempDir()
	if err := run(ctx, "build", []string{"-repo", imageRepo, "-out", dist, "-cli", hostPlatform()}); err != nil {
		t.Fatalf("release build: %v", err)
	}
	checkReleasedCLI(t, dist)
	if err := run(ctx, "push", []string{"-archive", filepath.Join(dist, "images.tar")}); err != nil {
		t.Fatalf("release push: %v", err)
	}
	built, closeArchive, err := ociimage.ReadArchive(filepath.Join(dist, "images.tar"))
	if err != nil {
		t.Fatal(err)
	}
	defer closeArchive()
	chartDir, _ := repo.Path("charts", "ehdb-election")
	chartVersion, appVersion, err := appVersion(chartDir)
	if err != nil {
		t.Fatal(err)
	}
	digests := map[string]string{}
	for _, n := range built {
		d, _ := n.Image.Digest()
		digests[n.Ref] = d.String()
	}
	webhookRef := imageRepo + "-webhook:" + appVersion
	if digests[webhookRef] == "" || digests[imageRepo+"-writer:"+appVersion] == "" {
		t.Fatalf("release archive holds %v, want the webhook and writer at %s", digests, appVersion)
	}

	tgz := filepath.Join(dist, "ehdb-election-"+chartVersion+".tgz")
	pushed := helm("push", tgz, "oci://"+reg.Host+"/charts", "--plain-http")
	t.Logf("helm push: %s", strings.TrimSpace(pushed))
	chartRef := "oci://" + reg.Host + "/charts/ehdb-election"

	ns := cluster.NewNamespace(t)
	const release = "ehdb-election"
	t.Cleanup(func() {
		// The lease guard's policy is cluster-scoped: gone with the release, or removed here.
		cs := cluster.Clientset()
		bg := context.Background()
		exec.Command(helmPath(t), "uninstall", release, "-n", ns, "--kubeconfig", cluster.Kubeconfig).Run()
		name := release + "-lease-guard." + ns
		_ = cs.AdmissionregistrationV1().ValidatingAdmissionPolicyBindings().Delete(bg, name, metav1.DeleteOptions{})
		_ = cs.AdmissionregistrationV1().ValidatingAdmissionPolicies().Delete(bg, name, metav1.DeleteOptions{})
	})
	helm("install", release, chartRef, "--version", chartVersion, "--plain-http",
		"-n", ns, "--kubeconfig", cluster.Kubeconfig)

	dep, err := cluster.Clientset().AppsV1().Deployments(ns).Get(ctx, release+"-webhook", metav1.GetOptions{})
	if err != nil {
		t.Fatalf("the webhook Deployment: %v", err)
	}
	var image string
	for _, c := range dep.Spec.Template.Spec.Containers {
		if strings.Contains(c.Image, "-webhook") {
			image = c.Image
		}
	}
	want := webhookRef + "@" + digests[webhookRef]
	if image != want {
		t.Fatalf("installed webhook image %q, want the release's %q", image, want)
	}

	// The reference the Deployment names is pullable by digest and is the built image.
	ref, err := name.NewDigest(imageRepo+"-webhook@"+digests[webhookRef], name.Insecure)
	if err != nil {
		t.Fatal(err)
	}
	pulled, err := remote.Image(ref, remote.WithContext(ctx))
	if err != nil {
		t.Fatalf("pulling %s: %v", ref, err)
	}
	if err := validate.Image(pulled); err != nil {
		t.Fatalf("pulled %s: %v", ref, err)
	}
	cfg, err := pulled.ConfigFile()
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Config.User != ociimage.NonRoot || len(cfg.Config.Entrypoint) != 1 || cfg.Config.Entrypoint[0] != "/ehdb-webhook" {
		t.Fatalf("pulled image config %+v", cfg.Config)
	}
	t.Logf("installed %s %s from %s; webhook image %s", release, chartVersion, chartRef, image)
}

// helmPath is the cached helm binary (already built by the test) for cleanups, which must not fail the test.
func helmPath(t *testing.T) string {
	p, err := repo.Path(".cache", "helm")
	if err != nil {
		return "helm"
	}
	matches, _ := filepath.Glob(filepath.Join(p, "*", "helm"))
	if len(matches) == 0 {
		return "helm"
	}
	return matches[0]
}
