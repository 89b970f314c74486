package knative

import (
	"bufio"
	"bytes"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	sourcesv1 "knative.dev/eventing/pkg/apis/sources/v1"
	servingv1 "knative.dev/serving/pkg/apis/serving/v1"
	"sigs.k8s.io/yaml"
)

// bundle is a set of decoded manifests: the base as written, or what
// kustomize builds from a kustomization.
type bundle struct {
	namespace   string // where the objects land
	services    []*servingv1.Service
	pingSources []*sourcesv1.PingSource
	deployments []*appsv1.Deployment
	configMaps  map[string]*corev1.ConfigMap
	secrets     []*corev1.Secret
	namespaces  []*corev1.Namespace
}

// kustomization is the part of kustomize's Kustomization the manifests use.
// It is decoded strictly: a field the loader does not know (a generator, a
// transformer) fails the test instead of being silently ignored, so what
// the tests check is what kustomize builds, apart from the labels and the
// namespace it adds.
type kustomization struct {
	APIVersion string `json:"apiVersion"`
	Kind       string `json:"kind"`
	Namespace  string `json:"namespace,omitempty"`
	Labels     []struct {
		Pairs            map[string]string `json:"pairs"`
		IncludeSelectors bool              `json:"includeSelectors,omitempty"`
		IncludeTemplates bool              `json:"includeTemplates,omitempty"`
	} `json:"labels,omitempty"`
	Resources []string `json:"resources"`
	Images    []struct {
		Name    string `json:"name"`
		NewName string `json:"newName,omitempty"`
		NewTag  string `json:"newTag,omitempty"`
		Digest  string `json:"digest,omitempty"`
	} `json:"images,omitempty"`
	Patches []struct {
		Path   string `json:"path,omitempty"`
		Patch  string `json:"patch,omitempty"`
		Target *struct {
			Group   string `json:"group,omitempty"`
			Version string `json:"version,omitempty"`
			Kind    string `json:"kind,omitempty"`
			Name    string `json:"name,omitempty"`
		} `json:"target,omitempty"`
	} `json:"patches,omitempty"`
}

func readKustomization(t *testing.T, dir string) kustomization {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join(dir, "kustomization.yaml"))
	require.NoError(t, err)
	var k kustomization
	require.NoError(t, yaml.UnmarshalStrict(raw, &k), "%s/kustomization.yaml uses a field these tests do not model", dir)
	require.Equal(t, "kustomize.config.k8s.io/v1beta1", k.APIVersion, dir)
	require.Equal(t, "Kustomization", k.Kind, dir)
	return k
}

// loadBase decodes every resource file of the base, as written.
func loadBase(t *testing.T) *bundle {
	t.Helper()
	k := readKustomization(t, "base")
	require.NotEmpty(t, k.Namespace, "the base sets the namespace its sinks name")
	b := newBundle()
	b.namespace = k.Namespace
	for _, res := range k.Resources {
		raw, err := os.ReadFile(filepath.Join("base", res))
		require.NoError(t, err, "base/kustomization.yaml lists %s", res)
		b.decode(t, filepath.Join("base", res), raw)
	}
	return b
}

func newBundle() *bundle {
	return &bundle{configMaps: map[string]*corev1.ConfigMap{}}
}

// decode splits a multi-document YAML stream and decodes each document
// strictly into its API type: an unknown or misspelt field fails.
func (b *bundle) decode(t *testing.T, file string, raw []byte) {
	t.Helper()
	r := utilyaml.NewYAMLReader(bufio.NewReader(bytes.NewReader(raw)))
	for {
		doc, err := r.Read()
		if errors.Is(err, io.EOF) {
			return
		}
		require.NoError(t, err, file)
		var tm metav1.TypeMeta
		require.NoError(t, yaml.Unmarshal(doc, &tm), file)
		if tm.Kind == "" && strings.TrimSpace(stripComments(doc)) == "" {
			continue // a document of comments only
		}
		var obj any
		switch tm.APIVersion + " " + tm.Kind {
		case "serving.knative.dev/v1 Service":
			s := &servingv1.Service{}
			b.services, obj = append(b.services, s), s
		case "sources.knative.dev/v1 PingSource":
			p := &sourcesv1.PingSource{}
			b.pingSources, obj = append(b.pingSources, p), p
		case "apps/v1 Deployment":
			d := &appsv1.Deployment{}
			b.deployments, obj = append(b.deployments, d), d
		case "v1 ConfigMap":
			obj = &corev1.ConfigMap{}
		case "v1 Secret":
			s := &corev1.Secret{}
			b.secrets, obj = append(b.secrets, s), s
		case "v1 Namespace":
			n := &corev1.Namespace{}
			b.namespaces, obj = append(b.namespaces, n), n
		default:
			require.Failf(t, "unexpected kind", "%s: %s %s: add it to the loader and to the checks", file, tm.APIVersion, tm.Kind)
		}
		require.NoError(t, yaml.UnmarshalStrict(doc, obj), "%s: %s does not decode into its API type", file, tm.Kind)
		if cm, ok := obj.(*corev1.ConfigMap); ok {
			require.NotContains(t, b.configMaps, cm.Name, "%s: ConfigMap %s twice", file, cm.Name)
			b.configMaps[cm.Name] = cm
		}
	}
}

func stripComments(doc []byte) string {
	var out strings.Builder
	for line := range strings.Lines(string(doc)) {
		if !strings.HasPrefix(strings.TrimSpace(line), "#") {
			out.WriteString(line)
		}
	}
	return out.String()
}

// workload is one container of a pod template, with where it lives.
type workload struct {
	kind, name string // of the owning object
	pod        *corev1.PodSpec
	c          *corev1.Container
	init       bool
}

func (w workload) String() string {
	return w.kind + " " + w.name + " container " + w.c.Name
}

// containers lists every container and init container of the bundle.
func (b *bundle) containers() []workload {
	var out []workload
	for _, s := range b.services {
		pod := &s.Spec.Template.Spec.PodSpec
		for i := range pod.Containers {
			out = append(out, workload{kind: "Service", name: s.Name, pod: pod, c: &pod.Containers[i]})
		}
	}
	for _, d := range b.deployments {
		pod := &d.Spec.Template.Spec
		for i := range pod.InitContainers {
			out = append(out, workload{kind: "Deployment", name: d.Name, pod: pod, c: &pod.InitContainers[i], init: true})
		}
		for i := range pod.Containers {
			out = append(out, workload{kind: "Deployment", name: d.Name, pod: pod, c: &pod.Containers[i]})
		}
	}
	return out
}

// secretExample reads base/secrets.example.env: the keys of the Secret
// aivedio-secrets, with placeholder values.
func secretExample(t *testing.T) map[string]string {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join("base", "secrets.example.env"))
	require.NoError(t, err)
	out := map[string]string{}
	for line := range strings.Lines(string(raw)) {
		line = strings.TrimSpace(line)
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		k, v, ok := strings.Cut(line, "=")
		require.True(t, ok, "secrets.example.env: %q is not KEY=value", line)
		out[k] = v
	}
	return out
}
