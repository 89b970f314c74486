// Package knative is the pipeline's Knative deployment and the tests that
// hold it to the code it deploys. It has no code of its own: the manifests
// are YAML (a kustomize base under base/, which `kubectl apply -k knative/`
// applies, and an example overlay under overlays/example/), the images are
// built from Dockerfile, and the tests are _test.go files, so the Knative
// and Kubernetes API types they decode into never reach a binary.
//
// # What is deployed
//
//   - One Knative Service per stage of the catalog (catalog.Stages), all
//     from the function image, STAGE picking the handler; they scale to
//     zero and are reachable only inside the cluster.
//   - The public API Service, always warm (min-scale 1).
//   - One source adapter Deployment per consumer group (catalog.Groups),
//     delivering to the Service of the group's stage.
//   - The outbox relay, two replicas, whose init steps apply the schema and
//     the topic catalog; the DLQ drainer, one container per group.
//   - A PingSource that wakes the reconcile stage every five minutes.
//
// Settings come from ConfigMaps, credentials from the Secret
// aivedio-secrets, which is created outside the kustomization
// (base/secrets.example.env lists its keys).
//
// # What the tests check
//
// Every manifest decodes strictly into the real API types (Knative Serving
// v1, Knative Eventing sources v1, Kubernetes apps and core v1) and passes
// Knative's own defaulting and validation with a default cluster
// configuration, warnings included. Deployments, for which Kubernetes ships
// no validation library, are checked for what the API server and the
// kubelet would refuse, and every container for resources and a locked
// down security context.
//
// The catalog is the contract: every stage has its Service, every group its
// adapter, whose sink is the cluster-local URL of its stage's Service, and
// its drainer.
//
// Every container's environment is exactly what its binary's Config in
// shared/config reads, as envconfig itself reflects it: each name is read,
// each required variable is set, settings come from ConfigMap keys and
// credentials from the Secret. The environment then loads with config.Load,
// and what it loads must agree with the manifests around it: ports and
// probes, each adapter's handler timeout against its Service's timeout, and
// each adapter's workers against what its Service takes at max-scale. A
// renamed or newly required variable fails here, not in production.
//
// The same checks run on what kustomize builds from knative/ and from the
// example overlay, built in the test with kustomize's Go API (no kubectl).
package knative
