# Sourced by build.sh and install-tools.sh: move a finished build into its
# cache folder, safely when another checkout on the machine builds the same
# folder at once (the cache is shared).
#
# publish_tool TMP DIR BINARY: TMP (this run's own folder) becomes DIR in one
# rename(2), which refuses a non-empty DIR; if another run published first,
# its complete DIR stays and TMP is dropped. Only a DIR without BINARY (a
# build that died half way) is removed first.
publish_tool() {
  local tmp=$1 dir=$2 binary=$3
  if ! mv -T "$tmp" "$dir" 2>/dev/null; then
    if [[ ! -x "$dir/$binary" ]]; then
      rm -rf "$dir" && mv -T "$tmp" "$dir"
    fi
  fi
  rm -rf "$tmp"
}
