#!/usr/bin/env bash
# Fetches the jars of a Kafka broker (KRaft mode) and its command-line tools
# from Maven Central, for the Kafka tests and bench. Prints the directory
# that holds them. They are kept in a cache outside the repository
# ($OMLET_KAFKA_LIBS, or ~/.cache/omlet/kafka-VERSION/libs) and fetched only
# when missing. Needs java and mvn: installs Debian's packages when missing.
set -euo pipefail
version=${OMLET_KAFKA_VERSION:-4.1.1}
libs=${OMLET_KAFKA_LIBS:-${XDG_CACHE_HOME:-$HOME/.cache}/omlet/kafka-$version/libs}
if [ -f "$libs/.complete" ]; then
    echo "$libs"
    exit 0
fi
if ! command -v java >/dev/null 2>&1 || ! command -v mvn >/dev/null 2>&1; then
    echo "kafka-jars.sh: installing OpenJDK and Maven from Debian's packages" >&2
    if [ "$(id -u)" = 0 ]; then SUDO=; else SUDO=sudo; fi
    $SUDO apt-get update -qq >&2
    DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq default-jdk-headless maven >&2
fi
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cat > "$work/pom.xml" <<POM
<project xmlns="http://maven.apache.org/POM/4.0.0">
  <modelVersion>4.0.0</modelVersion>
  <groupId>omlet</groupId>
  <artifactId>kafka-broker-jars</artifactId>
  <version>1</version>
  <packaging>pom</packaging>
  <dependencies>
    <dependency><groupId>org.apache.kafka</groupId><artifactId>kafka_2.13</artifactId><version>$version</version></dependency>
    <dependency><groupId>org.apache.kafka</groupId><artifactId>kafka-tools</artifactId><version>$version</version></dependency>
    <dependency><groupId>org.slf4j</groupId><artifactId>slf4j-reload4j</artifactId><version>1.7.36</version></dependency>
  </dependencies>
</project>
POM
mkdir -p "$libs"
echo "kafka-jars.sh: fetching Kafka $version from Maven Central into $libs" >&2
# One retry: a registry hiccup should not fail the whole test run.
for attempt in 1 2; do
    if (cd "$work" && mvn -q -B dependency:copy-dependencies -DoutputDirectory="$libs" >&2); then
        break
    fi
    [ "$attempt" = 2 ] && exit 1
    echo "kafka-jars.sh: fetching failed; trying once more in 10 s" >&2
    sleep 10
done
touch "$libs/.complete"
echo "$libs"
