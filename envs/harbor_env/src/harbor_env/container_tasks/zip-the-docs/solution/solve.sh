#!/bin/bash
set -e
cd /app && zip -q docs.zip docs/*.txt
