#!/usr/bin/env bash
# Runs every fuzz target of the module, each for FUZZTIME (default 60s):
# its seeds first (testdata/fuzz and f.Add: 2,000 of them take most of a
# minute on 2 cores), then new inputs. A failing
# input is written to the package's testdata/fuzz/<target>/, where plain
# `go test` (and CI) runs it from then on: commit it with the fix.
set -o errexit -o nounset -o pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

fuzztime="${FUZZTIME:-60s}"
# The packages with fuzz targets: a test file that declares one.
mapfile -t pkgs < <(git grep -l -E '^func Fuzz[A-Za-z0-9_]*\(f \*testing\.F\)' -- '*_test.go' | xargs -n1 dirname | sort -u)
ran=0
for dir in "${pkgs[@]}"; do
    for target in $(go test -list '^Fuzz' "./${dir}" | grep '^Fuzz'); do
        echo "--- fuzz: ${dir} ${target} (${fuzztime})"
        go test -run '^$' -fuzz "^${target}\$" -fuzztime "${fuzztime}" "./${dir}"
        ran=$((ran + 1))
    done
done
echo "fuzz: ${ran} targets, ${fuzztime} each, no failure"
