package main

import (
	"fmt"

	"k8s.io/component-base/version"
)

// runVersion prints the Kubernetes version linked in (set with -ldflags -X by
// build.sh, exactly as the upstream release build does).
func runVersion(_ []string) int {
	fmt.Println(version.Get().GitVersion)
	return 0
}
