#!/usr/bin/env bash
# Builds the images the local cluster's real node runs, without Docker and
# without any registry: Debian packages (mmdebstrap), local Go sources, umoci
# for the OCI layout and skopeo for the docker-archive tarball that the
# cluster imports into containerd.
#
#   pause        a static Go binary (images/pause), the pod sandbox
#   postgres:15  Debian bookworm's postgresql-15 and pgaudit + images/postgres/docker-entrypoint.sh
#                (bookworm packages no pgvector for 15)
#   postgres:17  Debian trixie's postgresql-17, pgaudit and pgvector + the same entrypoint
#   postgres:18  Debian forky's postgresql-18, pgaudit and pgvector + the same entrypoint
#   manager      the dbkeeper manager and versitygw, static, as the Dockerfile describes it
#
# Every image is cached by content under ~/.cache/dbkeeper/images: its
# tarball's name carries a hash of what it is built from (this script, the
# entrypoint, the Debian suite and packages, the manager binary), so a change
# builds it again and an unchanged input costs nothing. The Debian root
# filesystems are the slow part (about 3 minutes each, cold).
#
#   images/build.sh             build what is missing; print `key ref tarball` per image
#   images/build.sh KEY...      only these (pause, postgres:15, postgres:17, postgres:18, manager,
#                               manager-next: the same source as version "next", not built by default)
#
# Needs root for mmdebstrap (the postgres images) and the packages mmdebstrap,
# umoci, skopeo.
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
root=$(cd "$here/.." && pwd)
cache=${DBKEEPER_IMAGES_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/dbkeeper/images}
work=$cache/build
mkdir -p "$cache" "$work"

log() { echo "images: $*" >&2; }
hash_of() { sha256sum | cut -c1-12; }

for tool in umoci skopeo; do
	command -v "$tool" >/dev/null || { log "missing $tool: apt-get install mmdebstrap umoci skopeo"; exit 1; }
done

# oci_to_archive LAYOUT ARCHIVE REF: the image "img" of an OCI layout as a
# docker-archive tarball named REF, written atomically.
oci_to_archive() {
	rm -f "$2.tmp"
	skopeo copy --quiet "oci:$1:img" "docker-archive:$2.tmp:$3"
	mv "$2.tmp" "$2"
}

# --- pause -------------------------------------------------------------------
build_pause() {
	local ref=localhost/dbkeeper/pause:3.10
	local bin=$work/pause-root/pause
	mkdir -p "$work/pause-root"
	(cd "$root" && CGO_ENABLED=0 go build -trimpath -ldflags='-s -w' -o "$bin" ./images/pause)
	local key
	key=$(cat "$bin" "${BASH_SOURCE[0]}" | hash_of)
	local archive=$cache/pause-$key.tar
	if [[ ! -s $archive ]]; then
		rm -rf "$work/pause-oci"
		tar -C "$work/pause-root" --owner=0 --group=0 --mtime=@0 -cf "$work/pause-layer.tar" ./pause
		umoci init --layout "$work/pause-oci"
		umoci new --image "$work/pause-oci:img"
		umoci raw add-layer --image "$work/pause-oci:img" "$work/pause-layer.tar"
		umoci config --image "$work/pause-oci:img" --config.entrypoint /pause --config.user 65535:65535 \
			--architecture amd64 --os linux
		oci_to_archive "$work/pause-oci" "$archive" "$ref"
		log "built $ref"
	fi
	echo "pause $ref $archive"
}

# --- postgres ----------------------------------------------------------------
# A Debian minbase with Debian's postgresql-N and an entrypoint honouring the
# official image's interface (POSTGRES_USER, POSTGRES_PASSWORD, POSTGRES_DB,
# PGDATA, /docker-entrypoint-initdb.d), uid/gid 999 as the official image.
build_postgres() { # suite major [extension package...]
	local suite=$1 major=$2
	shift 2
	local ref=localhost/dbkeeper/postgres:$major
	# contrib (pg_stat_statements, hstore, ...) is in postgresql-N; the
	# extensions of spec.postgresql.extensions that Debian packages apart
	# follow as arguments
	local packages="postgresql-$major,postgresql-client-$major,pgbackrest,libnss-wrapper,xz-utils,zstd"
	local p
	for p in "$@"; do packages+=",$p"; done
	# The postgres user and group must exist with id 999 before
	# postgresql-common's postinst creates them with a dynamic id; and no
	# default cluster (the entrypoint runs initdb into PGDATA).
	local essential_hook='set -e
		echo "postgres:x:999:" >>"$1/etc/group"
		echo "postgres:x:999:999:PostgreSQL administrator,,,:/var/lib/postgresql:/bin/bash" >>"$1/etc/passwd"
		mkdir -p "$1/etc/postgresql-common"
		echo "create_main_cluster = false" >"$1/etc/postgresql-common/createcluster.conf"'
	local customize_hook='set -e
		sed -ri "s!^#?(listen_addresses)\s*=\s*\S+.*!\1 = '"'"'*'"'"'!" "$1/usr/share/postgresql/'"$major"'/postgresql.conf.sample"
		install -d -o 999 -g 999 -m 3777 "$1/var/run/postgresql"
		install -d -o 999 -g 999 -m 1777 "$1/var/lib/postgresql/data"
		install -d -m 0755 "$1/docker-entrypoint-initdb.d"
		rm -rf "$1"/var/lib/apt/lists/* "$1"/var/cache/apt/* "$1"/var/log/*.log "$1"/var/log/apt/*
		# a private key generated at build time has no place in an image
		rm -f "$1/etc/ssl/private/ssl-cert-snakeoil.key" "$1/etc/ssl/certs/ssl-cert-snakeoil.pem"'
	local rootfs_key
	rootfs_key=$(printf '%s\n' "$suite" "$packages" "$essential_hook" "$customize_hook" | hash_of)
	local rootfs=$work/rootfs-$suite-$major-$rootfs_key.tar
	local key
	key=$(printf '%s\n' "$rootfs_key" "$(cat "$here/postgres/docker-entrypoint.sh" "${BASH_SOURCE[0]}")" | hash_of)
	local archive=$cache/postgres-$major-$key.tar
	if [[ -s $archive ]]; then
		echo "postgres:$major $ref $archive"
		return 0
	fi
	local start=$SECONDS
	if [[ ! -s $rootfs ]]; then
		command -v mmdebstrap >/dev/null || { log "missing mmdebstrap: apt-get install mmdebstrap"; exit 1; }
		[[ $(id -u) == 0 ]] || { log "building the Debian root filesystem of $ref needs root (mmdebstrap --mode=root)"; exit 1; }
		log "building the Debian $suite root filesystem with postgresql-$major (about 3 minutes, once)"
		local sources=("deb http://deb.debian.org/debian $suite main"
			"deb http://deb.debian.org/debian $suite-updates main"
			"deb http://deb.debian.org/debian-security $suite-security main")
		# Debian testing (forky) signs Release files valid for a week only;
		# a mirror that syncs less often serves them expired, which apt
		# refuses. The packages are still checked against the signed
		# Release file's hashes.
		local aptopts=()
		[[ $suite != forky ]] || aptopts=(--aptopt='Acquire::Check-Valid-Until "false"')
		nice -n 10 mmdebstrap --quiet --mode=root --variant=minbase --format=tar "${aptopts[@]}" \
			--include="$packages" \
			--dpkgopt='path-exclude=/usr/share/man/*' --dpkgopt='path-exclude=/usr/share/doc/*' \
			--dpkgopt='path-include=/usr/share/doc/*/copyright' --dpkgopt='path-exclude=/usr/share/locale/*' \
			--dpkgopt='path-exclude=/usr/share/info/*' \
			--essential-hook="$essential_hook" --customize-hook="$customize_hook" \
			"$suite" "$rootfs.tmp" "${sources[@]}" </dev/null
		mv "$rootfs.tmp" "$rootfs"
	fi
	local pgver
	pgver=$(tar -xOf "$rootfs" ./var/lib/dpkg/status | awk '/^Package: postgresql-'"$major"'$/{p=1} p&&/^Version:/&&!v{v=$2} END{print v}')
	local entry=$work/postgres-$major-entry
	rm -rf "$entry" "$work/postgres-$major-oci"
	install -D -m 0755 "$here/postgres/docker-entrypoint.sh" "$entry/usr/local/bin/docker-entrypoint.sh"
	tar -C "$entry" --owner=0 --group=0 --mtime=@0 -cf "$entry.tar" ./usr
	local oci=$work/postgres-$major-oci
	umoci init --layout "$oci"
	umoci new --image "$oci:img"
	umoci raw add-layer --image "$oci:img" "$rootfs"
	umoci raw add-layer --image "$oci:img" "$entry.tar"
	umoci config --image "$oci:img" \
		--config.entrypoint docker-entrypoint.sh --config.cmd postgres \
		--config.env "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin:/usr/lib/postgresql/$major/bin" \
		--config.env "PG_MAJOR=$major" --config.env "PG_VERSION=$pgver" --config.env LANG=C.UTF-8 \
		--config.env PGDATA=/var/lib/postgresql/data \
		--config.exposedports 5432/tcp --config.volume /var/lib/postgresql/data \
		--config.stopsignal SIGINT --architecture amd64 --os linux \
		--config.label "org.opencontainers.image.description=PostgreSQL $pgver from Debian $suite"
	oci_to_archive "$oci" "$archive" "$ref"
	rm -rf "$oci" "$entry" "$entry.tar"
	log "built $ref (Debian $suite postgresql-$major $pgver) in $((SECONDS - start))s"
	echo "postgres:$major $ref $archive"
}

# --- manager -----------------------------------------------------------------
# What the Dockerfile describes, read from the Dockerfile itself so the two
# cannot drift: the static binary built as its build stage builds it, copied
# to the path of its COPY line, run as its USER through its ENTRYPOINT, with
# its labels. The distroless base contributes /etc/passwd and /etc/group with
# its nonroot user, and /tmp; there is no shell. images/images_test.go checks
# a built image against the Dockerfile.
dockerfile_value() { # instruction: the rest of the Dockerfile's last such line
	awk -v k="$1" 'toupper($1) == k { $1 = ""; v = substr($0, 2) } END { print v }' "$root/Dockerfile"
}
# With a variant (manager-next), the same source is built as another
# version (agentapi.buildVersion): a second build of dbkeeper to upgrade
# to in a test, without a second checkout.
build_manager() { # [variant]
	local variant=${1:-} name=manager${1:+-$1} ldflags='-s -w'
	[[ -z $variant ]] || ldflags+=" -X github.com/dbkeeper/dbkeeper/internal/agentapi.buildVersion=$variant"
	local user entrypoint path
	user=$(dockerfile_value USER)
	entrypoint=$(dockerfile_value ENTRYPOINT | tr -d '[]" ')
	path=$(awk 'toupper($1) == "COPY" && $2 ~ /^--from=/ { print $4 }' "$root/Dockerfile" | tail -1)
	[[ -n $user && -n $entrypoint && -n $path ]] || { log "cannot read USER, ENTRYPOINT and COPY --from from $root/Dockerfile"; exit 1; }
	local layer=$work/$name-root
	rm -rf "$layer"
	mkdir -p "$layer/etc" "$layer/tmp" "$(dirname "$layer$path")"
	(cd "$root" && CGO_ENABLED=0 GOOS=linux GOARCH=amd64 go build -trimpath -ldflags="$ldflags" -o "$layer$path" ./cmd/manager)
	# the other static binaries of the final stage: versitygw, built from
	# the module its COPY --from stage copies (test/tools/versitygw).
	local vgw_path vgw_dir
	vgw_path=$(awk 'toupper($1) == "COPY" && $2 == "--from=versitygw" { print $4 }' "$root/Dockerfile")
	vgw_dir=$(awk '/^FROM .* AS versitygw/ { on = 1 } on && toupper($1) == "COPY" { print $2; exit }' "$root/Dockerfile")
	[[ -n $vgw_path && -n $vgw_dir ]] || { log "cannot read the versitygw stage from $root/Dockerfile"; exit 1; }
	mkdir -p "$(dirname "$layer$vgw_path")"
	(cd "$root/$vgw_dir" && CGO_ENABLED=0 GOOS=linux GOARCH=amd64 go build -trimpath -ldflags='-s -w' -o "$layer$vgw_path" github.com/versity/versitygw/cmd/versitygw)
	printf 'root:x:0:0:root:/root:/sbin/nologin\nnonroot:x:65532:65532:nonroot:/home/nonroot:/sbin/nologin\n' >"$layer/etc/passwd"
	printf 'root:x:0:\nnonroot:x:65532:\n' >"$layer/etc/group"
	chmod 1777 "$layer/tmp"
	local key
	key=$(cat "$layer$path" "$layer$vgw_path" "$root/Dockerfile" "${BASH_SOURCE[0]}" | hash_of)
	local ref=localhost/dbkeeper/manager:$key archive=$cache/manager-$key.tar
	if [[ ! -s $archive ]]; then
		tar -C "$layer" --owner=0 --group=0 --mtime=@0 -cf "$work/$name-layer.tar" .
		local oci=$work/$name-oci labels=()
		while read -r label; do labels+=(--config.label "$label"); done < <(
			awk '/^LABEL/ { on = 1; sub(/^LABEL[ \t]+/, "") } on { line = $0; sub(/[ \t]*\\$/, "", line); print line; if ($0 !~ /\\$/) on = 0 }' "$root/Dockerfile" |
				sed -E 's/^[ \t]+//; s/"//g')
		rm -rf "$oci"
		umoci init --layout "$oci"
		umoci new --image "$oci:img"
		umoci raw add-layer --image "$oci:img" "$work/$name-layer.tar"
		umoci config --image "$oci:img" --config.entrypoint "$entrypoint" --config.user "$user" \
			"${labels[@]}" --architecture amd64 --os linux
		oci_to_archive "$oci" "$archive" "$ref"
		rm -rf "$oci" "$work/$name-layer.tar"
		log "built $ref${variant:+ (version $variant)}"
		# Each build of the manager is ~100 MB: drop those of earlier days
		# (a run still importing one started today).
		find "$cache" -maxdepth 1 -name 'manager-*.tar' -mtime +0 -delete
	fi
	echo "$name $ref $archive"
}

keys=("$@")
((${#keys[@]})) || keys=(pause postgres:15 postgres:17 postgres:18 manager)
for k in "${keys[@]}"; do
	case $k in
	pause) build_pause ;;
	postgres:15) build_postgres bookworm 15 postgresql-15-pgaudit ;;
	postgres:17) build_postgres trixie 17 postgresql-17-pgaudit postgresql-17-pgvector ;;
	postgres:18) build_postgres forky 18 postgresql-18-pgaudit postgresql-18-pgvector ;;
	manager) build_manager ;;
	manager-next) build_manager next ;;
	*) log "unknown image $k (pause, postgres:15, postgres:17, postgres:18, manager, manager-next)"; exit 2 ;;
	esac
done
