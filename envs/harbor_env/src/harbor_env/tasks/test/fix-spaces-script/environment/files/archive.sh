#!/bin/bash
dir=$1
mkdir -p $dir/archive
n=0
for f in $(ls $dir/*.log); do
  mv $f $dir/archive/
  n=$((n + 1))
done
echo $n
