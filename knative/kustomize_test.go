package knative

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/kustomize/api/krusty"
	"sigs.k8s.io/kustomize/kyaml/filesys"
	"sigs.k8s.io/yaml"
)

// TestRootKustomizationIsTheBase: `kubectl apply -k knative/` applies
// exactly the base that TestBase checks.
func TestRootKustomizationIsTheBase(t *testing.T) {
	k := readKustomization(t, ".")
	require.Equal(t, []string{"base"}, k.Resources)
	require.Empty(t, k.Namespace)
	require.Empty(t, k.Patches)
	require.Empty(t, k.Images)
}

// TestOverlayTargetsTheBase: the example overlay builds on the base, and
// every image it sets and every object it patches exists there. It keeps
// the namespace: the adapters' sinks name it.
func TestOverlayTargetsTheBase(t *testing.T) {
	const dir = "overlays/example"
	k := readKustomization(t, dir)
	require.Equal(t, []string{"../../base"}, k.Resources)
	require.Empty(t, k.Namespace, "the sinks name the base's namespace")

	b := loadBase(t)
	images := map[string]bool{}
	for _, w := range b.containers() {
		images[w.c.Image] = true
	}
	require.NotEmpty(t, k.Images)
	for _, img := range k.Images {
		require.True(t, images[img.Name], "the overlay sets image %s, which no container of the base uses", img.Name)
	}
	for _, p := range k.Patches {
		kind, name := "", ""
		switch {
		case p.Path != "":
			raw, err := os.ReadFile(filepath.Join(dir, p.Path))
			require.NoError(t, err)
			var obj struct {
				metav1.TypeMeta   `json:",inline"`
				metav1.ObjectMeta `json:"metadata"`
			}
			require.NoError(t, yaml.Unmarshal(raw, &obj), p.Path)
			kind, name = obj.Kind, obj.Name
		case p.Target != nil:
			kind, name = p.Target.Kind, p.Target.Name
		default:
			require.Fail(t, "a patch without path or target")
		}
		require.True(t, b.has(kind, name), "the overlay patches %s %s, which is not in the base", kind, name)
	}
}

func (b *bundle) has(kind, name string) bool {
	switch kind {
	case "ConfigMap":
		return b.configMaps[name] != nil
	case "Service":
		for _, s := range b.services {
			if s.Name == name {
				return true
			}
		}
	case "Deployment":
		for _, d := range b.deployments {
			if d.Name == name {
				return true
			}
		}
	case "PingSource":
		for _, p := range b.pingSources {
			if p.Name == name {
				return true
			}
		}
	}
	return false
}

// TestKustomizeBuild runs every check of TestBase on what kustomize builds
// from knative/ and from the example overlay, so the overlay's patches are
// held to the same rules (capacity, timeouts, environment). It builds with
// kustomize's own Go API (the krusty package `kubectl kustomize` embeds, with
// its default options), so it needs no kubectl and never skips.
func TestKustomizeBuild(t *testing.T) {
	for _, dir := range []string{".", "overlays/example"} {
		t.Run(dir, func(t *testing.T) {
			out := kustomizeBuild(t, dir)
			b := newBundle()
			b.decode(t, "kustomize build "+dir, out)
			require.Len(t, b.namespaces, 1)
			b.namespace = b.namespaces[0].Name
			for _, s := range b.services {
				require.Equal(t, b.namespace, s.Namespace, "Service %s", s.Name)
			}
			for _, d := range b.deployments {
				require.Equal(t, b.namespace, d.Namespace, "Deployment %s", d.Name)
			}
			checkBundle(t, b)
			checkImagesSet(t, readKustomization(t, dir), b)
		})
	}
}

// checkImagesSet: every image the kustomization sets replaces the base's
// name in the build, so no container would pull the unqualified base image.
func checkImagesSet(t *testing.T, k kustomization, b *bundle) {
	t.Helper()
	built := map[string]bool{}
	for _, w := range b.containers() {
		built[w.c.Image] = true
	}
	for _, img := range k.Images {
		require.False(t, built[img.Name], "the build still uses image %s", img.Name)
		want := img.NewName
		if want == "" {
			want = img.Name
		}
		switch {
		case img.Digest != "":
			want += "@" + img.Digest
		case img.NewTag != "":
			want += ":" + img.NewTag
		}
		require.True(t, built[want], "no container of the build uses image %s", want)
	}
}

// kustomizeBuild is `kustomize build dir`: the rendered YAML stream.
func kustomizeBuild(t *testing.T, dir string) []byte {
	t.Helper()
	abs, err := filepath.Abs(dir)
	require.NoError(t, err)
	resMap, err := krusty.MakeKustomizer(krusty.MakeDefaultOptions()).Run(filesys.MakeFsOnDisk(), abs)
	require.NoError(t, err, "kustomize build %s", dir)
	out, err := resMap.AsYaml()
	require.NoError(t, err, "kustomize build %s", dir)
	return out
}
