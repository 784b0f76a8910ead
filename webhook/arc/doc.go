// Package arc is what runner-guard knows about actions-runner-controller's
// scale-set objects (API group actions.github.com/v1alpha1): which runner a pod
// is, where it is registered, which credentials reach it, and whether ARC has
// already removed it from GitHub.
//
// A scale-set runner pod is controlled by an EphemeralRunner. Its spec names the
// GitHub config URL (the runner's scope and API host) and the Secret holding
// ARC's credentials; its status names the runner's ID and registered name.
// Labels on the pod are cut and trimmed by ARC and may not be propagated at
// all, so the EphemeralRunner is the only reliable source.
//
// ARC's Go module is not on the module proxy, so EphemeralRunners are read as
// unstructured objects and validated here. The package does not import package
// webhook: the decision path asks it, and another runner controller can sit
// beside it.
package arc
