#!/bin/sh
echo stop
