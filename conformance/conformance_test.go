// Package conformance runs the Gateway API conformance suite (sigs.k8s.io/gateway-api/conformance)
// against the tunnel gateway. It is compiled by scripts/build-conformance.sh and run by
// `make conformance` (crates/tunnel-gateway-fixtures, bin `conformance`), which brings up the
// cluster, the install and the Cloudflare double and runs this binary inside the cluster's
// private network namespace; see docs/conformance/README.md.
//
// The suite's own flags (-gateway-class, -supported-features, -skip-tests, -run-test,
// -report-output, -version, ...) are passed through. This file fixes what is not a choice of
// the run: the profiles and the implementation's name.
package conformance

import (
	"testing"

	"k8s.io/apimachinery/pkg/util/sets"
	"sigs.k8s.io/gateway-api/conformance"
	confv1 "sigs.k8s.io/gateway-api/conformance/apis/v1"
	"sigs.k8s.io/gateway-api/conformance/utils/suite"
)

func TestConformance(t *testing.T) {
	opts := conformance.DefaultOptions(t)
	opts.ConformanceProfiles = sets.New(
		suite.GatewayHTTPConformanceProfileName,
		suite.GatewayGRPCConformanceProfileName,
	)
	version := opts.Implementation.Version
	if version == "" {
		version = "dev"
	}
	opts.Implementation = confv1.Implementation{
		Organization: "kube-tenancy",
		Project:      "tunnel-gateway",
		URL:          "https://github.com/kube-tenancy/kube-tenancy",
		Version:      version,
		Contact:      []string{"@kube-tenancy/maintainers"},
	}
	conformance.RunConformanceWithOptions(t, opts)
}
