package main

import (
	"fmt"
	"os"

	"github.com/go-logr/logr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/runner-guard/runner-guard/webhook"
)

// budgetReservations shares each replica's reservations of budget
// disruptions with the others through Leases in the guarded namespaces,
// naming this replica by its pod (POD_NAME, else the hostname, which
// Kubernetes sets to the pod's name).
func budgetReservations(live client.Client, getenv func(string) string, log logr.Logger) (*webhook.Reservations, error) {
	pod := getenv("POD_NAME")
	if pod == "" {
		host, err := os.Hostname()
		if err != nil {
			return nil, fmt.Errorf("name this replica in budget reservations (set POD_NAME): %w", err)
		}
		pod = host
	}
	replica, err := webhook.ReplicaIdentity(pod)
	if err != nil {
		return nil, err
	}
	log.V(1).Info("sharing budget reservations", "replica", replica)
	return webhook.NewReservations(live, replica, log), nil
}
